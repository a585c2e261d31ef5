"""The subscription operations behind the HTTP API and `/admin subscribe`: create, list,
delete, poll, stream and feedback — one implementation for both surfaces.

`owner` is who may see a subscription: `api` (the bearer token: every chat) or the chat key it
was made in. Ids have fixed shapes (`sub_` / `sug_` and 16 hex digits); an id that is unknown,
deleted or not the caller's is a 404, the same answer, so ids of others cannot be probed.
Feedback names the subscription (and optionally the chat) the suggestion was delivered to; a
suggestion of another one is a 404, a second feedback on one a 409. The webhook secret is in
the answer to its creation and nowhere else.
"""

from __future__ import annotations

import secrets
from typing import Any

from gateway.core.admin_ops import JSON
from gateway.core.errors import NotFound, UserInputError, WrongState
from gateway.core.ports import Clock
from gateway.features.contributions import ApiCall, EventStream
from gateway.subscriptions.addresses import url_problem
from gateway.subscriptions.engine import API_OWNER, Engine, iso, new_id
from gateway.subscriptions.schema import (
    FeedbackRequest,
    ListQuery,
    StreamQuery,
    SubscriptionRequest,
    SuggestionsQuery,
    WebhookSubscription,
)
from gateway.subscriptions.stream import Streams
from vault.audit import AuditLog, Outcome
from vault.subscriptions import SubscriptionRow, SubscriptionStore


def subscription_json(sub: SubscriptionRow) -> JSON:
    return {
        "id": sub.id,
        "patterns": sub.patterns,
        "callback": sub.callback,
        "url": sub.url,
        "min_relevance": sub.min_relevance,
        "max_per_trigger": sub.max_per_trigger,
        "cooldown_seconds": sub.cooldown_ms // 1000,
        "chats": sub.chats,
        "users": sub.users,
        "enabled": sub.enabled,
        "disabled_reason": sub.disabled_reason,
        "failures": sub.failures,
        "last_triggered_at": None if sub.last_triggered_ms is None else iso(sub.last_triggered_ms),
        "created_at": iso(sub.created_ms),
    }


class SubscriptionOps:
    def __init__(
        self,
        *,
        store: SubscriptionStore,
        engine: Engine,
        streams: Streams,
        clock: Clock,
        audit: AuditLog,
        private_ok: bool = False,
    ) -> None:
        self.store = store
        self.engine = engine
        self.streams = streams
        self.clock = clock
        self.audit = audit
        self.private_ok = private_ok  # `[subscriptions] webhook_private_addresses`

    async def _mine(self, sub_id: str, owner: str) -> SubscriptionRow:
        sub = await self.store.get(sub_id)
        if sub is None or (owner != API_OWNER and sub.owner != owner):
            raise NotFound(f"No subscription {sub_id[:40]}.")
        return sub

    async def create(self, request: SubscriptionRequest, *, owner: str) -> JSON:
        body = request.root
        if owner != API_OWNER and any(c != owner for c in body.chats):
            raise UserInputError("A subscription made in a chat can only watch that chat.")
        webhook = isinstance(body, WebhookSubscription)
        if isinstance(body, WebhookSubscription):
            problem = url_problem(body.url, private_ok=self.private_ok)
            if problem is not None:
                raise UserInputError(f"The webhook url cannot be used: {problem}.")
        secret = secrets.token_urlsafe(32) if webhook else None
        sub = SubscriptionRow(
            id=new_id("sub"),
            owner=owner,
            patterns=[p.model_dump() for p in body.patterns],
            callback=body.callback,
            url=body.url if isinstance(body, WebhookSubscription) else None,
            secret=secret,
            min_relevance=body.min_relevance,
            max_per_trigger=body.max_per_trigger,
            cooldown_ms=body.cooldown_seconds * 1000,
            chats=list(body.chats) or ([] if owner == API_OWNER else [owner]),
            users=list(body.users),
            enabled=True,
            disabled_reason=None,
            failures=0,
            last_triggered_ms=None,
            created_ms=self.clock.now_ms(),
        )
        await self.store.create(sub)
        self.engine.invalidate()
        created: dict[str, Any] = {"id": sub.id}
        if secret is not None:
            created["secret"] = secret
        return created

    async def listing(self, *, owner: str, callback: str = "any", state: str = "any") -> JSON:
        subs = await self.store.listing(None if owner == API_OWNER else owner)
        return {
            "subscriptions": [
                subscription_json(s)
                for s in subs
                if callback in ("any", s.callback)
                and (state == "any" or s.enabled == (state == "enabled"))
            ]
        }

    async def delete(self, sub_id: str, *, owner: str) -> JSON:
        await self._mine(sub_id, owner)
        deleted = await self.store.delete(sub_id, self.clock.now_ms())
        self.engine.invalidate()
        self.streams.ended(sub_id)
        return {"id": sub_id, "deleted": deleted}

    async def set_enabled(self, sub_id: str, enabled: bool, *, owner: str, actor: str) -> JSON:
        """Turn a subscription on again (e.g. after its webhook was disabled for failing; the
        failure count restarts) or off; audited. Its state as `GET` lists it."""
        await self._mine(sub_id, owner)
        reason = None if enabled else f"disabled by {actor}"
        if not await self.store.set_enabled(sub_id, enabled, reason):
            raise NotFound(f"No subscription {sub_id[:40]}.")
        self.engine.invalidate()
        await self.audit.record(
            actor=actor,
            via="api" if owner == API_OWNER else "chat",
            action="subscription enabled" if enabled else "subscription disabled",
            args={"id": sub_id},
            outcome=Outcome.OK,
            result="",
            now_ms=self.clock.now_ms(),
        )
        return subscription_json(await self._mine(sub_id, owner))

    async def poll(self, sub_id: str, since: int, *, owner: str) -> JSON:
        await self._mine(sub_id, owner)
        rows, cursor = await self.streams.page(sub_id, since)
        return {"events": [r.payload for r in rows], "cursor": str(cursor)}

    async def feedback(self, event_id: str, body: FeedbackRequest, *, owner: str) -> JSON:
        unknown = NotFound(f"No suggestion {event_id[:40]} for that subscription.")
        event = await self.store.event(event_id)
        if event is None or event.subscription != body.subscription:
            raise unknown
        if body.chat is not None and body.chat != event.chat:
            raise unknown
        await self._mine(event.subscription, owner)  # a deleted or foreign one: 404 too
        if body.item >= len(event.payload["suggestion"]["items"]):
            raise NotFound(f"That suggestion has no item {body.item}.")
        if not await self.store.set_status(event_id, body.action):
            now = await self.store.event(event_id)  # a concurrent answer may have just won
            raise WrongState(f"That suggestion was already marked {(now or event).status}.")
        return {"id": event_id, "status": body.action, "item": body.item}

    # --- the HTTP handlers (`ApiRoute`) -------------------------------------------------------

    async def http_create(self, call: ApiCall) -> JSON:
        assert isinstance(call.body, SubscriptionRequest)
        return await self.create(call.body, owner=API_OWNER)

    async def http_list(self, call: ApiCall) -> JSON:
        assert isinstance(call.query, ListQuery)
        q = call.query
        return await self.listing(owner=API_OWNER, callback=q.callback, state=q.state)

    async def http_delete(self, call: ApiCall) -> JSON:
        return await self.delete(call.params["id"], owner=API_OWNER)

    async def http_enable(self, call: ApiCall) -> JSON:
        return await self.set_enabled(call.params["id"], True, owner=API_OWNER, actor="api")

    async def http_disable(self, call: ApiCall) -> JSON:
        return await self.set_enabled(call.params["id"], False, owner=API_OWNER, actor="api")

    async def http_poll(self, call: ApiCall) -> JSON:
        assert isinstance(call.query, SuggestionsQuery)
        return await self.poll(call.query.subscription, int(call.query.since), owner=API_OWNER)

    async def http_feedback(self, call: ApiCall) -> JSON:
        assert isinstance(call.body, FeedbackRequest)
        return await self.feedback(call.params["id"], call.body, owner=API_OWNER)

    async def http_stream(self, call: ApiCall) -> EventStream:
        assert isinstance(call.query, StreamQuery)
        sub = await self._mine(call.query.subscription, API_OWNER)
        resume = call.headers.get("Last-Event-ID", "").strip()
        if resume:
            if not resume.isdigit() or len(resume) > 18:
                raise UserInputError("Last-Event-ID must be the id of an event of this stream.")
            after = int(resume)
        else:
            after = await self.streams.latest(sub.id)
        return self.streams.events(sub.id, after)
