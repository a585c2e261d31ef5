"""The suggestion block under a reply: which items, and sending them.

A turn step that lets the rest of the chain run first: the reply is composed and sent before
anything here happens, so suggestions never hold it up. Then, for a turn the model answered,
unless there is nothing the finder could find (`presence.py`: one probe, not its reads),
suggestions are off for the user or the chat, and at most once per
`chat_cooldown_minutes`: the finder's candidates, less the items this chat was offered within
`item_cooldown_hours` or dismissed, less what this turn's request already carried (its context
trace), adjusted by feedback (`tuning.py`), at least `min_relevance`, at most `max_per_turn`.
They are written as pending, sent as a notice (never part of the model's history) with Use /
Dismiss buttons where the platform has them (a press arrives as `/use #ID` or `/dismiss #ID`), and
marked shown once delivered. A failure here is logged and the turn goes on: a suggestion is a bonus.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from gateway.agent.context import content_hash
from gateway.agent.traces import TraceStore
from gateway.core.messages import Button, Outbound, OutboundKind
from gateway.core.scope import Scope
from gateway.suggestions.finder import Candidate, Finder, ItemType
from gateway.suggestions.presence import Presence
from gateway.suggestions.settings import SuggestionsSection
from gateway.suggestions.tuning import Tuning
from gateway.turns.commands import Hint
from gateway.turns.delivery import Delivery
from gateway.turns.turn import Next, Step, Turn
from vault.conversations import Conversations
from vault.suggestions import NewSuggestion, SuggestionStore

log = logging.getLogger(__name__)

RECENT_MESSAGES = 4
OVERFETCH = 4  # candidates asked per slot: cooldowns and the trace may remove some
LABELS = {
    ItemType.DECISION: "Decision",
    ItemType.CHANGE: "Changed",
    ItemType.DOC: "Document",
    ItemType.MEMORY: "Your note",
    ItemType.FOLLOWUP: "Follow-up",
    ItemType.WARNING: "Warning",
}


def in_trace(traces: TraceStore, scope: Scope) -> tuple[set[str], set[str]]:
    """(document titles, content hashes) of what this chat's last request carried."""
    trace = traces.get(scope.chat.key)
    if trace is None:
        return set(), set()
    titles = {i.label for i in trace.items if i.source == "documents" and i.label}
    return titles, {i.content_hash for i in trace.items}


def already_given(c: Candidate, titles: set[str], hashes: set[str]) -> bool:
    """Whether the request carried `c`, so offering it adds nothing. Never for a superseded
    document, nor for one that changed since it was given — unless this very request carried
    its new version (the reply rests on it: "changed since" would be news to no one)."""
    if c.type is ItemType.WARNING:
        return False
    if c.type is ItemType.CHANGE:
        return bool(c.version) and c.version in hashes
    if c.key.startswith("doc:"):
        return c.title in titles
    if c.key.startswith("memory:"):
        return content_hash(f"Memory #{c.key[7:]}: {c.content}") in hashes
    return False


def render(items: Sequence[Candidate], hint: Hint) -> str:
    lines = ["Possibly useful here:"]
    for n, c in enumerate(items, start=1):
        lines.append(f"{n}. {LABELS[c.type]}: {c.title} — {c.summary}")
        lines.append(f"   Why: {c.reason}")
    numbers = "N" if len(items) > 1 else "1"
    lines.append(f"{hint('use')} {numbers} to use it, {hint('dismiss')} {numbers} to hide it.")
    return "\n".join(lines)


def buttons(ids: Sequence[int]) -> tuple[tuple[Button, ...], ...]:
    """Use / Dismiss per item; a press comes back as `/use #ID` / `/dismiss #ID`: the
    suggestion's own id, so a button under an older block acts on its own item."""
    return tuple(
        (Button(label=f"Use {n}", payload=f"/use #{i}"),
         Button(label=f"Dismiss {n}", payload=f"/dismiss #{i}"))
        for n, i in enumerate(ids, start=1)
    )  # fmt: skip


class Inline:
    def __init__(
        self,
        *,
        finder: Finder,
        presence: Presence,
        store: SuggestionStore,
        tuning: Tuning,
        conversations: Conversations,
        traces: TraceStore,
        delivery: Delivery,
        hint_for: Callable[[str], Hint],
        settings: SuggestionsSection,
    ) -> None:
        self.finder = finder
        self.presence = presence
        self.store = store
        self.tuning = tuning
        self.conversations = conversations
        self.traces = traces
        self.delivery = delivery
        self.hint_for = hint_for
        self.settings = settings

    def step(self) -> Step:
        async def suggest(turn: Turn, nxt: Next) -> None:
            await nxt(turn)  # the reply first
            scope = turn.scope
            if scope is None or turn.command is not None or turn.replies == 0:
                return
            try:
                await self.offer(scope)
            except Exception:  # a suggestion is a bonus: never fail the turn for it
                log.exception("suggestions for %s failed", scope.chat.key)

        return suggest

    async def pick(self, scope: Scope) -> list[Candidate]:
        """What to show under this turn's reply (empty: nothing, or not now)."""
        s = self.settings
        if not s.enabled or not await self.presence.anything(scope):  # nothing to find
            return []
        if await self.store.is_off(scope.user_pk, scope.chat_pk):
            return []
        last = await self.store.last_block_ms(scope.chat_pk)
        if last is not None and scope.now_ms - last < s.chat_cooldown_minutes * 60_000:
            return []
        since = scope.now_ms - int(s.item_cooldown_hours * 3_600_000)
        offered = await self.store.recent_keys(scope.chat_pk, since)
        rows = await self.conversations.history(scope.session_pk, limit=RECENT_MESSAGES,
                                                before_id=scope.message_pk)  # fmt: skip
        recent = [r.text for r in rows if r.role == "user"]
        # Feedback only lowers relevance (`tuning.py`): what is under the threshold here stays so.
        found = await self.finder.find(scope, scope.text, recent=recent, exclude=offered,
                                       limit=s.max_per_turn * OVERFETCH,
                                       min_relevance=s.min_relevance)  # fmt: skip
        titles, hashes = in_trace(self.traces, scope)
        fresh = [c for c in found if not already_given(c, titles, hashes)]
        adjusted = await self.tuning.adjust(scope.chat_pk, fresh, scope.now_ms)
        return [c for c in adjusted if c.relevance >= s.min_relevance][: s.max_per_turn]

    async def offer(self, scope: Scope) -> list[int]:
        """Pick, record as pending, send, mark shown; the ids shown."""
        items = await self.pick(scope)
        if not items:
            return []
        ids = await self.store.add_block(
            chat=scope.chat_pk,
            user=scope.user_pk,
            items=[
                NewSuggestion(item_key=c.key, type=c.type.value, title=c.title,
                              summary=c.summary, content=c.content, relevance=c.relevance,
                              reason=c.reason)
                for c in items
            ],
            now_ms=scope.now_ms,
        )  # fmt: skip
        text = render(items, self.hint_for(scope.chat.channel))
        out = Outbound(chat=scope.chat, text=text, idempotency_key=f"suggestions:{ids[0]}",
                       kind=OutboundKind.NOTICE, buttons=buttons(ids))  # fmt: skip
        result = await self.delivery.deliver(out)
        if not result.delivered:
            return []
        await self.store.mark_shown(ids, scope.now_ms)
        return ids
