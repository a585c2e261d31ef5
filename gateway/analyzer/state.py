"""A session's analyzer state and its stored JSON (`sessions.analyzer_state`).

Version 2 keeps, besides the recent messages' keywords and the cooldown bookkeeping, the
embedding of each recent user message (int8, base64: `semantic.pack`) and the model that made
them, so every message is embedded once. Reading is tolerant: a field of the wrong shape is
dropped rather than failing the turn. A state of the previous version (no `version` key) is
migrated: its keywords and cooldowns are kept, it has no vectors yet. Vectors of another model
than the running one are ignored (and replaced as new messages come in).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.analyzer.semantic import unpack

VERSION = 2
SUGGESTIBLE = ("clear", "compact")
# A stored vector: its packed text (what is saved) and its values (what is compared).
Stored = tuple[str, tuple[float, ...]]


@dataclass(slots=True, kw_only=True)
class WatchState:
    recent: list[list[str]] = field(default_factory=list)
    vectors: list[Stored] = field(default_factory=list)
    vector_model: str | None = None
    topic_started_ms: int | None = None
    messages: int = 0  # user messages in this session, commands included
    last_suggestion_ms: int | None = None
    last_suggestion_at: int | None = None  # `messages` when the last tip was shown
    last_command: str | None = None
    followed: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WatchState:
        state = cls()
        recent = data.get("recent")
        if isinstance(recent, list):
            state.recent = [
                [w for w in m if isinstance(w, str)] for m in recent if isinstance(m, list)
            ]
        for name in ("topic_started_ms", "last_suggestion_ms", "last_suggestion_at"):
            value = data.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(state, name, value)
        messages = data.get("messages")
        state.messages = messages if isinstance(messages, int) and messages >= 0 else 0
        command = data.get("last_command")
        state.last_command = command if command in SUGGESTIBLE else None
        state.followed = data.get("followed") is True
        if data.get("version") == VERSION:
            state._read_vectors(data)
        return state

    def _read_vectors(self, data: dict[str, Any]) -> None:
        model, packed = data.get("vector_model"), data.get("vectors")
        if not isinstance(model, str) or not isinstance(packed, list):
            return
        for text in packed:
            values = unpack(text) if isinstance(text, str) else None
            if values is not None:
                self.vectors.append((text, values))
        self.vector_model = model if self.vectors else None

    def to_json(self) -> dict[str, Any]:
        # By hand: dataclasses.asdict deep-copies every list (it showed in profiles).
        return {
            "version": VERSION,
            "recent": self.recent,
            "vectors": [text for text, _ in self.vectors],
            "vector_model": self.vector_model,
            "topic_started_ms": self.topic_started_ms,
            "messages": self.messages,
            "last_suggestion_ms": self.last_suggestion_ms,
            "last_suggestion_at": self.last_suggestion_at,
            "last_command": self.last_command,
            "followed": self.followed,
        }

    def vectors_of(self, model: str | None) -> list[tuple[float, ...]]:
        """The recent vectors, if `model` made them."""
        if model is None or model != self.vector_model:
            return []
        return [values for _, values in self.vectors]

    def with_vector(self, model: str, vector: Stored, window: int) -> WatchState:
        kept = self.vectors if model == self.vector_model else []
        self.vectors = [*kept[-(window - 1) :], vector] if window > 1 else [vector]
        self.vector_model = model
        return self

    def mark_shown(self, command: str, now_ms: int) -> None:
        self.last_suggestion_ms = now_ms
        self.last_suggestion_at = self.messages
        self.last_command = command
        self.followed = False
