"""A session's analyzer state and its stored JSON (`sessions.analyzer_state`).

Version 3 keeps, besides the recent messages' keywords and the cooldown bookkeeping, one entry
per recent user message on the semantic side: its embedding (int8, base64: `semantic.pack`)
once computed, or its text (`{"text": ...}`, cut at `MAX_EMBED_CHARS`) while no verdict has
needed it yet (`lazy.py`), and the model that made the vectors, so every message is embedded
at most once. Reading is tolerant: a field of the wrong shape is dropped rather than failing
the turn. A state of version 2 (vectors only) reads as it is; one of version 1 (no `version`
key) is migrated: its keywords and cooldowns are kept, it has no vectors yet. Vectors of
another model than the running one are ignored (and replaced as new messages come in).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.analyzer.semantic import unpack

VERSION = 3
READABLE = (2, 3)  # versions whose vectors are read as they are
SUGGESTIBLE = ("clear", "compact")
# A stored vector: its packed text (what is saved) and its values (what is compared).
Stored = tuple[str, tuple[float, ...]]
# A recent message on the semantic side: its vector, or (a plain str) its text until needed.
Entry = Stored | str


@dataclass(slots=True, kw_only=True)
class WatchState:
    recent: list[list[str]] = field(default_factory=list)
    vectors: list[Entry] = field(default_factory=list)
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
        if data.get("version") in READABLE:
            state._read_vectors(data)
        return state

    def _read_vectors(self, data: dict[str, Any]) -> None:
        model, packed = data.get("vector_model"), data.get("vectors")
        if not isinstance(model, str) or not isinstance(packed, list):
            return
        for item in packed:
            if isinstance(item, dict) and isinstance(item.get("text"), str) and item["text"]:
                self.vectors.append(item["text"])
                continue
            values = unpack(item) if isinstance(item, str) else None
            if values is not None:
                self.vectors.append((item, values))
        self.vector_model = model if self.vectors else None

    def to_json(self) -> dict[str, Any]:
        # By hand: dataclasses.asdict deep-copies every list (it showed in profiles).
        return {
            "version": VERSION,
            "recent": self.recent,
            "vectors": [{"text": e} if isinstance(e, str) else e[0] for e in self.vectors],
            "vector_model": self.vector_model,
            "topic_started_ms": self.topic_started_ms,
            "messages": self.messages,
            "last_suggestion_ms": self.last_suggestion_ms,
            "last_suggestion_at": self.last_suggestion_at,
            "last_command": self.last_command,
            "followed": self.followed,
        }

    def vectors_of(self, model: str | None) -> list[tuple[float, ...]]:
        """The recent vectors computed so far, if `model` made them."""
        if model is None or model != self.vector_model:
            return []
        return [e[1] for e in self.vectors if not isinstance(e, str)]

    def pending_of(self, model: str | None) -> list[str]:
        """The texts of the recent messages not embedded yet (for `model`)."""
        if model is None or model != self.vector_model:
            return []
        return [e for e in self.vectors if isinstance(e, str)]

    def resolved(self, model: str, found: dict[str, Stored | None]) -> WatchState:
        """The pending texts replaced by their vectors (`found`; None: it failed, dropped).
        A new list: a state may share its lists with the copy this process remembers."""
        if model == self.vector_model:
            kept: list[Entry] = []
            for e in self.vectors:
                if not isinstance(e, str) or e not in found:
                    kept.append(e)
                elif (vector := found[e]) is not None:
                    kept.append(vector)
            self.vectors = kept
        return self

    def with_vector(self, model: str, vector: Entry, window: int) -> WatchState:
        """The message's vector (or its text, to embed when needed) joins the window."""
        kept = self.vectors if model == self.vector_model else []
        self.vectors = [*kept[-(window - 1) :], vector] if window > 1 else [vector]
        self.vector_model = model
        return self

    def mark_shown(self, command: str, now_ms: int) -> None:
        self.last_suggestion_ms = now_ms
        self.last_suggestion_at = self.messages
        self.last_command = command
        self.followed = False
