"""Triggers in, events out: which subscriptions a trigger concerns, what each one gets, stored.

Three triggers: a chat message (a turn hook), documents changed (the knowledge rescan), a
memory added. For each live, enabled subscription out of its cooldown whose filters admit the
trigger and whose patterns match it, the items are found (the finder, for a message), passed
through the privacy filter for the chat the trigger concerns (`guard.py`), cut to
`min_relevance` and `max_per_trigger`, and written to the vault as one event; only then is
delivery told (`notify`). Nothing is ever sent that is not a row first.

Who may see what: a message's items are checked against that turn's scope, and a document
restricted to some chats reaches a subscription made over the API only if it names this chat
(one without `chats` gets only unscoped documents, as for a change); a changed document
goes to a subscription without a chat filter only if it has no scope, and to each filtered chat
only if visible there; a memory goes only to subscriptions naming its owner in `users` (and
never to one made in a group chat). A subscription made in a chat (`owner` a chat key) only
ever hears that chat.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gateway.core.ports import Clock
from gateway.core.scope import Scope
from gateway.subscriptions.guard import ItemGuard, chat_scope
from gateway.subscriptions.matching import Match, Matcher
from gateway.suggestions.finder import Finder
from vault.subscriptions import NewEvent, SubscriptionRow, SubscriptionStore

log = logging.getLogger(__name__)

API_OWNER = "api"


class TriggerType(StrEnum):
    MESSAGE = "message"
    DOCUMENT_CHANGED = "document_changed"
    MEMORY_ADDED = "memory_added"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def item(type_: str, title: str, summary: str, relevance: float, reason: str) -> dict[str, Any]:
    return {
        "type": str(type_),
        "title": title,
        "summary": summary,
        "relevance": round(float(relevance), 4),
        "reason": reason,
    }


class Engine:
    def __init__(
        self,
        *,
        store: SubscriptionStore,
        guard: ItemGuard,
        matcher: Matcher,
        clock: Clock,
        finder: Callable[[], Finder | None] = lambda: None,
        notify: Callable[[str, bool], None] = lambda sub_id, webhook: None,
    ) -> None:
        self.store = store
        self.guard = guard
        self.matcher = matcher
        self.clock = clock
        self.finder = finder
        self.notify = notify
        self._live: list[SubscriptionRow] | None = None

    def invalidate(self) -> None:
        """The subscriptions changed (created, deleted, disabled): reload before the next use."""
        self._live = None

    async def live(self) -> list[SubscriptionRow]:
        if self._live is None:
            self._live = [s for s in await self.store.listing() if s.enabled]
        return self._live

    def _ready(self, sub: SubscriptionRow, now_ms: int) -> bool:
        last = sub.last_triggered_ms
        return last is None or now_ms - last >= sub.cooldown_ms

    async def _emit(
        self,
        sub: SubscriptionRow,
        trigger: dict[str, str],
        items: list[dict[str, Any]],
        now_ms: int,
    ) -> None:
        event_id = new_id("sug")
        payload = {
            "subscription": sub.id,
            "idempotency_key": f"{sub.id}:{event_id}",
            "suggestion": {
                "id": event_id,
                "created_at": iso(now_ms),
                "trigger": trigger,
                "items": items[: sub.max_per_trigger],
            },
        }
        webhook = sub.callback == "webhook"
        event = NewEvent(id=event_id, chat=trigger["chat"], payload=payload)
        await self.store.add_events(sub.id, [event], webhook=webhook, now_ms=now_ms)
        self.invalidate()  # its last_triggered_ms moved
        self.notify(sub.id, webhook)

    # --- the triggers ---------------------------------------------------------------------------

    async def message(self, scope: Scope) -> None:
        """A user wrote `scope.text` in `scope.chat`."""
        subs = await self.live()
        if not subs:
            return
        chat, user, now = scope.chat.key, scope.user.key, scope.now_ms
        for sub in subs:
            if not self._ready(sub, now) or not _admits(sub, chat=chat, user=user):
                continue
            match = await self.matcher.text(sub.patterns, scope.text)
            if match is None:
                continue
            items = await self._found(sub, scope, match)
            if items:
                trigger = {"type": TriggerType.MESSAGE, "source": f"message:{scope.message_pk}",
                           "chat": chat}  # fmt: skip
                await self._emit(sub, trigger, items, now)

    async def _found(
        self, sub: SubscriptionRow, scope: Scope, match: Match
    ) -> list[dict[str, Any]]:
        finder = self.finder()
        if finder is None:
            return []
        found = await finder.find(
            scope, scope.text, limit=sub.max_per_trigger, min_relevance=sub.min_relevance
        )
        keys = [c.key for c in found]
        allowed = await self.guard.allowed(scope, keys)
        if sub.owner == API_OWNER:  # the listener is not the chat: what it may hear, less
            allowed &= await self._for_listener(sub, scope, keys)
        return [
            item(c.type, c.title, c.summary, c.relevance, f"{match.reason}; {c.reason}")
            for c in found
            if c.key in allowed and c.relevance >= sub.min_relevance
        ]

    async def _for_listener(self, sub: SubscriptionRow, scope: Scope, keys: list[str]) -> set[str]:
        """What an API subscription may receive of a chat's items: a document restricted by
        `[context.scopes]` only if the subscription names this chat (without `chats`, only
        the unscoped ones); the other items as the chat may see them."""
        documents = [k for k in keys if k.startswith("doc:")]
        if sub.chats and scope.chat.key in sub.chats:
            return set(keys)
        return {k for k in keys if k not in documents} | await self._documents_in(
            "", documents, scope.now_ms
        )

    async def documents_changed(self, paths: Sequence[str]) -> None:
        """The knowledge rescan indexed new versions of these documents."""
        subs = await self.live()
        if not subs or not paths:
            return
        now = self.clock.now_ms()
        documents = await self.store.documents_by_path(paths)
        for sub in subs:
            if not self._ready(sub, now) or sub.users:
                continue  # a document change has no user: a user filter never admits it
            matched = [
                (doc_id, path, title, m)
                for doc_id, path, title, _ in documents
                if (m := self.matcher.document(sub.patterns, path, title)) is not None
            ]
            if not matched:
                continue
            for chat in sub.chats or [""]:
                keys = [f"doc:{doc_id}" for doc_id, *_ in matched]
                allowed = await self._documents_in(chat, keys, now)
                shown = [(d, path, title, m) for d, path, title, m in matched
                         if f"doc:{d}" in allowed]  # fmt: skip
                items = [
                    item("change", title, f"{path} has a new version", 1.0, m.reason)
                    for _, path, title, m in shown
                ]
                if items:  # the source names only what this listener may see
                    source = ",".join(path for _, path, _, _ in shown)[:200]
                    trigger = {"type": TriggerType.DOCUMENT_CHANGED, "source": source, "chat": chat}
                    await self._emit(sub, trigger, items, now)

    async def _documents_in(self, chat: str, keys: list[str], now_ms: int) -> set[str]:
        """The documents visible in `chat`; with no chat, only those every chat may see."""
        if not chat:
            scope = chat_scope("none:", in_group=True, now_ms=now_ms)
            return await self.guard.allowed(scope, keys)
        channel, _, rest = chat.partition(":")
        chat_id = rest.partition(":")[0]
        kinds = await self.store.chat_kinds([(channel, chat_id)])
        in_group = kinds.get((channel, chat_id), "group") != "dm"  # unknown: the careful side
        return await self.guard.allowed(chat_scope(chat, in_group=in_group, now_ms=now_ms), keys)

    async def memory_added(self, user_pk: int, memory_id: int, text: str) -> None:
        """A memory of a user was saved: only subscriptions naming that user hear of it."""
        subs = await self.live()
        if not subs:
            return
        user_key = await self.store.user_key(user_pk)
        now = self.clock.now_ms()
        for sub in subs:
            if user_key not in sub.users or sub.owner != API_OWNER or not self._ready(sub, now):
                continue
            match = await self.matcher.text(sub.patterns, text)
            if match is None:
                continue
            title = text if len(text) <= 80 else text[:79] + "…"
            items = [item("memory", title, text[:200], 1.0, match.reason)]
            trigger = {"type": TriggerType.MEMORY_ADDED, "source": f"memory:{memory_id}",
                       "chat": ""}  # fmt: skip
            await self._emit(sub, trigger, items, now)


def _admits(sub: SubscriptionRow, *, chat: str, user: str) -> bool:
    if sub.owner != API_OWNER and sub.owner != chat:
        return False  # made in a chat: hears that chat only
    if sub.chats and chat not in sub.chats:
        return False
    return not sub.users or user in sub.users
