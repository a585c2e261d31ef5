"""The context pipeline: phased providers, a token budget, and a trace of every decision.

Phases run in order: system -> prior -> current -> enrich, then three built-in phases: filter
(drop exact duplicates), optimize (fit the token budget by dropping the least relevant items,
never a required one such as the persona or the current message) and finalize (turn items into
an `LLMRequest`-ready system text and alternating messages). Providers register for a phase
with a priority and may decline by returning None. Every assembly records a `ContextTrace`
(provider, items added/removed, tokens, milliseconds) that `/context trace` and the admin
surface show, so "what context do you have?" is answered from the same record the model saw.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Literal, NamedTuple, Protocol

from gateway.core.llm import LLMMessage, TextPart
from gateway.core.scope import Scope

log = logging.getLogger(__name__)


# Request messages remembered for reuse, up to this much text (then forgotten all at once).
MESSAGE_MEMO_CHARS = 4_000_000


def estimate_tokens(text: str) -> int:
    """A cheap, deterministic estimate (about four characters per token)."""
    return len(text) // 4 + 1


class Phase(IntEnum):
    SYSTEM = 0
    PRIOR = 1
    CURRENT = 2
    ENRICH = 3
    FILTER = 4
    OPTIMIZE = 5
    FINALIZE = 6


class Position(StrEnum):
    SYSTEM_STABLE = "system_stable"  # cacheable prefix: identical bytes across requests
    SYSTEM = "system"  # per-request system text
    HISTORY = "history"
    CURRENT = "current"


@dataclass(slots=True, kw_only=True)
class ContextItem:
    source: str
    position: Position
    content: str
    relevance: float = 0.5
    role: str = "user"  # for history items
    required: bool = False
    reason: str = ""
    tokens: int = 0

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = estimate_tokens(self.content)


class Provider(Protocol):
    name: str
    phase: Phase
    priority: int

    async def provide(self, scope: Scope) -> list[ContextItem] | None:
        """Items to add, or None to decline."""


class TraceEntry(NamedTuple):  # a tuple: a dozen per request, cheap to make
    phase: str
    provider: str
    added: int
    removed: int
    tokens: int
    ms: float
    note: str = ""


@dataclass(slots=True)
class ContextTrace:
    chat_key: str
    at_ms: int
    budget: int
    entries: list[TraceEntry] = field(default_factory=list)
    total_tokens: int = 0
    kept: list[str] = field(default_factory=list)  # "source: reason" of the items kept

    def render(self) -> str:
        lines = [f"Context trace ({self.total_tokens}/{self.budget} tokens):"]
        for e in self.entries:
            note = f" — {e.note}" if e.note else ""
            lines.append(
                f"- {e.phase}/{e.provider}: +{e.added} -{e.removed} items, "
                f"{e.tokens} tokens, {e.ms:.2f} ms{note}"
            )
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Assembled:
    system_stable: str
    system_dynamic: str
    messages: tuple[LLMMessage, ...]
    trace: ContextTrace


class TraceStore:
    """The last trace per chat, bounded (LRU)."""

    def __init__(self, capacity: int = 1000) -> None:
        self._traces: OrderedDict[str, ContextTrace] = OrderedDict()
        self._capacity = capacity

    def put(self, trace: ContextTrace) -> None:
        self._traces[trace.chat_key] = trace
        self._traces.move_to_end(trace.chat_key)
        while len(self._traces) > self._capacity:
            self._traces.popitem(last=False)

    def get(self, chat_key: str) -> ContextTrace | None:
        return self._traces.get(chat_key)


class ContextPipeline:
    def __init__(self, *, budget_tokens: int, providers: list[Provider] | None = None) -> None:
        self.budget_tokens = budget_tokens
        self._providers: list[Provider] = []
        self._messages: dict[tuple[str, str], LLMMessage] = {}
        self._memo_chars = 0
        for provider in providers or []:
            self.register(provider)

    def register(self, provider: Provider) -> None:
        self._providers.append(provider)
        self._providers.sort(key=lambda p: (p.phase, -p.priority))

    async def assemble(self, scope: Scope) -> Assembled:
        trace = ContextTrace(chat_key=scope.chat.key, at_ms=scope.now_ms, budget=self.budget_tokens)
        items: list[ContextItem] = []
        for provider in self._providers:
            started = time.perf_counter()
            added = await provider.provide(scope)
            ms = (time.perf_counter() - started) * 1000
            if added is None:
                trace.entries.append(
                    TraceEntry(provider.phase.name.lower(), provider.name, 0, 0, 0, ms, "declined")
                )
                continue
            items.extend(added)
            trace.entries.append(
                TraceEntry(
                    provider.phase.name.lower(),
                    provider.name,
                    len(added),
                    0,
                    sum(i.tokens for i in added),
                    ms,
                )
            )
        items = self._filter(items, trace)
        items = self._optimize(items, trace)
        return self._finalize(items, trace)

    def _filter(self, items: list[ContextItem], trace: ContextTrace) -> list[ContextItem]:
        seen: set[tuple[Position, str]] = set()
        kept = []
        history = Position.HISTORY  # a history message may repeat: it is not deduplicated
        for item in items:
            if item.position is not history:
                key = (item.position, item.content)
                if key in seen:
                    continue
                seen.add(key)
            kept.append(item)
        removed = len(items) - len(kept)
        trace.entries.append(TraceEntry("filter", "dedupe", 0, removed, 0, 0.0))
        return kept

    def _optimize(self, items: list[ContextItem], trace: ContextTrace) -> list[ContextItem]:
        total = sum(i.tokens for i in items)
        dropped: list[ContextItem] = []
        if total > self.budget_tokens:
            # Lowest relevance first; among equals, the earliest (oldest) first.
            order = sorted(
                (i for i, item in enumerate(items) if not item.required),
                key=lambda i: (items[i].relevance, i),
            )
            drop: set[int] = set()
            for index in order:
                if total <= self.budget_tokens:
                    break
                drop.add(index)
                total -= items[index].tokens
            dropped = [items[i] for i in sorted(drop)]
            items = [item for i, item in enumerate(items) if i not in drop]
        note = ", ".join(sorted({d.source for d in dropped})) if dropped else ""
        trace.entries.append(
            TraceEntry(
                "optimize",
                "budget",
                0,
                len(dropped),
                -sum(d.tokens for d in dropped),
                0.0,
                f"dropped from {note}" if note else "",
            )
        )
        trace.total_tokens = total
        return items

    def _message(self, role: Literal["user", "assistant"], texts: list[str]) -> LLMMessage:
        """The request message for a run of texts. A history message is in the next requests
        too, so the (immutable) messages are remembered instead of rebuilt every turn."""
        key = (role, texts[0] if len(texts) == 1 else "\n\n".join(texts))
        message = self._messages.get(key)
        if message is None:
            if self._memo_chars > MESSAGE_MEMO_CHARS:
                self._messages.clear()
                self._memo_chars = 0
            message = self._messages[key] = LLMMessage(role, (TextPart(key[1]),))
            self._memo_chars += len(key[1])
        return message

    def _finalize(self, items: list[ContextItem], trace: ContextTrace) -> Assembled:
        stable: list[str] = []
        dynamic: list[str] = []
        # Runs of one role become one message (the API wants the roles to alternate).
        runs: list[tuple[Literal["user", "assistant"], list[str]]] = []
        for item in items:
            position = item.position
            if position is Position.SYSTEM_STABLE:
                stable.append(item.content)
                continue
            if position is Position.SYSTEM:
                dynamic.append(item.content)
                continue
            role: Literal["user", "assistant"] = (
                "assistant" if position is Position.HISTORY and item.role == "assistant" else "user"
            )
            if runs and runs[-1][0] == role:
                runs[-1][1].append(item.content)
            elif runs or role == "user":  # never start with the assistant
                runs.append((role, [item.content]))
        messages = tuple(self._message(role, texts) for role, texts in runs)
        trace.kept = [f"{i.source}: {i.reason}" if i.reason else i.source for i in items]
        trace.entries.append(
            TraceEntry(
                "finalize", "request", 0, 0, trace.total_tokens, 0.0, f"{len(messages)} messages"
            )
        )
        return Assembled("\n\n".join(stable), "\n\n".join(dynamic), messages, trace)
