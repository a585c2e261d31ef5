"""The context pipeline: phased providers, a token budget, and a trace of every decision.

Phases run in order: system -> prior -> current -> enrich, then three built-in phases: filter
(drop exact duplicates), optimize (fit the token budget by dropping the least relevant items,
never a required one such as the persona or the current message) and finalize (turn items into
an `LLMRequest`-ready system text and alternating messages). Providers register for a phase
with a priority and may decline by returning None. Every assembly records a `ContextTrace`
(provider, items added/removed, tokens, milliseconds) and every item kept or dropped with its
content hash, which `/context`, `/admin trace` and the `context_status` tool show, so "what
context do you have?" is answered from the same record the model saw.

Admins switch providers on and off and change their priority at run time (`configure`, used by
`/context events`); the change applies from the next assembly. A provider may cap its own items
(`budget_tokens`), and may ask to be told which of its items made it into the request
(`assembled(scope, items)`), e.g. to audit what was really injected.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Literal, NamedTuple, Protocol

from gateway.core.llm import LLMMessage, TextPart
from gateway.core.scope import Scope

log = logging.getLogger(__name__)


# Request messages remembered for reuse, up to this much text (then forgotten all at once).
MESSAGE_MEMO_CHARS = 4_000_000
# What one remembered message costs beside its text (key, message, part, dict slot; bytes,
# counted as characters): without it, short messages kept the memo growing for ~400,000 turns.
MESSAGE_MEMO_ENTRY_CHARS = 400


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
    label: str = ""  # what it is, for people: a document's title
    content_hash: str = ""  # identity of the content; the pipeline fills it when empty
    key: str = ""  # the provider's own handle on the item (e.g. "doc:12")

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = estimate_tokens(self.content)


class Provider(Protocol):
    name: str
    phase: Phase
    priority: int

    async def provide(self, scope: Scope) -> list[ContextItem] | None:
        """Items to add, or None to decline."""


class TraceItem(NamedTuple):
    """One item of an assembled request, as `/context` lists it."""

    source: str
    position: str
    tokens: int
    content_hash: str
    label: str = ""
    reason: str = ""


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _trace_item(item: ContextItem) -> TraceItem:
    if not item.content_hash:
        item.content_hash = content_hash(item.content)
    return TraceItem(
        item.source, item.position.value, item.tokens, item.content_hash, item.label, item.reason
    )


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    name: str
    phase: str
    priority: int
    default_priority: int
    enabled: bool


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
    session_pk: int = 0  # the conversation it was made in (0: unknown, a trace saved before)
    entries: list[TraceEntry] = field(default_factory=list)
    total_tokens: int = 0
    # Every item kept (history messages too) and every item dropped, in request order.
    items: list[TraceItem] = field(default_factory=list)
    dropped: list[tuple[TraceItem, str]] = field(default_factory=list)  # (item, why)

    @property
    def kept(self) -> list[str]:
        """Each kept item as `source: reason` (read from `items`: neither built nor saved)."""
        return [f"{i.source}: {i.reason}" if i.reason else i.source for i in self.items]

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


AfterAssembly = Callable[[Scope, list[ContextItem]], Awaitable[None]]


class ContextPipeline:
    def __init__(self, *, budget_tokens: int, providers: list[Provider] | None = None) -> None:
        self.budget_tokens = budget_tokens
        self._providers: list[Provider] = []
        self._defaults: dict[str, int] = {}
        self._disabled: set[str] = set()
        self._priority: dict[str, int] = {}
        self._messages: dict[tuple[str, str], LLMMessage] = {}
        self._memo_chars = 0
        self._hashes: dict[str, str] = {}  # content -> content_hash, for history items
        self._hash_chars = 0
        for provider in providers or []:
            self.register(provider)

    def register(self, provider: Provider) -> None:
        if provider.name in self._defaults:
            raise ValueError(f"context provider {provider.name!r} registered twice")
        self._defaults[provider.name] = provider.priority
        self._providers.append(provider)
        self._order()

    def _order(self) -> None:
        self._providers.sort(key=lambda p: (p.phase, -self._priority.get(p.name, p.priority)))

    def providers(self) -> list[ProviderInfo]:
        """Every provider in the order they run, with what admins changed."""
        return [
            ProviderInfo(
                name=p.name,
                phase=p.phase.name.lower(),
                priority=self._priority.get(p.name, p.priority),
                default_priority=self._defaults[p.name],
                enabled=p.name not in self._disabled,
            )
            for p in self._providers
        ]

    def configure(
        self, name: str, *, enabled: bool | None = None, priority: int | None = None
    ) -> ProviderInfo:
        """Switch a provider on or off, or set its priority (None: leave as is). KeyError for
        an unknown name. Applies from the next assembly."""
        if name not in self._defaults:
            raise KeyError(name)
        if enabled is not None:
            (self._disabled.discard if enabled else self._disabled.add)(name)
        if priority is not None:
            self._priority[name] = priority
        self._order()
        return next(info for info in self.providers() if info.name == name)

    async def assemble(self, scope: Scope) -> Assembled:
        trace = ContextTrace(
            chat_key=scope.chat.key, at_ms=scope.now_ms, budget=self.budget_tokens,
            session_pk=scope.session_pk,
        )  # fmt: skip
        items: list[ContextItem] = []
        caps: dict[str, int] = {}
        hooks: list[tuple[str, AfterAssembly]] = []
        for provider in self._providers:
            if provider.name in self._disabled:
                trace.entries.append(
                    TraceEntry(provider.phase.name.lower(), provider.name, 0, 0, 0, 0.0, "off")
                )
                continue
            started = time.perf_counter()
            added = await provider.provide(scope)
            ms = (time.perf_counter() - started) * 1000
            if (cap := getattr(provider, "budget_tokens", None)) is not None:
                caps[provider.name] = int(cap)
            if (hook := getattr(provider, "assembled", None)) is not None:
                hooks.append((provider.name, hook))
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
        items = self._cap(items, caps, trace)
        items = self._optimize(items, trace)
        assembled = self._finalize(items, trace)
        for name, hook in hooks:
            await hook(scope, [i for i in items if i.source == name])
        return assembled

    def _cap(
        self, items: list[ContextItem], caps: dict[str, int], trace: ContextTrace
    ) -> list[ContextItem]:
        """Each capped provider's items within its own budget, least relevant dropped first."""
        drop: set[int] = set()
        for source, cap in caps.items():
            mine = [i for i, item in enumerate(items) if item.source == source]
            total = sum(items[i].tokens for i in mine)
            for index in sorted(mine, key=lambda i: (items[i].relevance, i)):
                if total <= cap:
                    break
                if not items[index].required:
                    drop.add(index)
                    total -= items[index].tokens
        for index in sorted(drop):
            item = items[index]
            trace.dropped.append((_trace_item(item), f"over the {item.source} budget"))
        if drop:
            trace.entries.append(
                TraceEntry("optimize", "caps", 0, len(drop), 0, 0.0, f"{len(drop)} over budget")
            )
        return [item for i, item in enumerate(items) if i not in drop]

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
            trace.dropped.extend((_trace_item(d), "over the total budget") for d in dropped)
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
            self._memo_chars += len(key[1]) + MESSAGE_MEMO_ENTRY_CHARS
        return message

    def _hashed(self, item: ContextItem) -> ContextItem:
        """`item` with its content hash, remembered: history items come back every turn (new
        objects with the same text), and hashing them all again was most of the trace's cost."""
        if not item.content_hash:
            found = self._hashes.get(item.content)
            if found is None:
                if self._hash_chars > MESSAGE_MEMO_CHARS:
                    self._hashes.clear()
                    self._hash_chars = 0
                found = self._hashes[item.content] = content_hash(item.content)
                self._hash_chars += len(item.content) + MESSAGE_MEMO_ENTRY_CHARS
            item.content_hash = found
        return item

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
        trace.items = [_trace_item(self._hashed(i)) for i in items]
        trace.entries.append(
            TraceEntry(
                "finalize", "request", 0, 0, trace.total_tokens, 0.0, f"{len(messages)} messages"
            )
        )
        return Assembled("\n\n".join(stable), "\n\n".join(dynamic), messages, trace)
