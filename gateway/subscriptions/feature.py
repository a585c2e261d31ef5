"""Context subscriptions as a feature: other systems watch for patterns and are told by webhook,
server-sent events or polling, each event carrying only items in scope of the chat it concerns.

It contributes the turn hook (the `message` trigger), the webhook delivery job, `/admin
subscribe`, and the admin API's `POST`/`GET /context/subscriptions`, `DELETE
/context/subscriptions/{id}`, `GET /context/suggestions`, `POST
/context/suggestions/{id}/feedback` and `GET /context/stream`. The composition root hands it
what it uses of other features as plain callables: the knowledge feature's scope rules
(`visible`) and rescan (`watch_documents`, the `document_changed` trigger), the suggestion
finder, the embedder; the `memory_added` trigger comes from the memory store's listeners.
With several replicas on PostgreSQL, the other replicas' events and subscription changes reach
this one's streams and trigger cache through wake-up hints (`hints.py`, a background job).
What it built stays on the feature (`engine`, `webhooks`, `streams`, `hints`, `ops`, `store`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from gateway.core.embedding import Embedder
from gateway.features.contributions import ApiRoute, Contributions
from gateway.subscriptions.api import SubscriptionOps
from gateway.subscriptions.chat import SubscribeCommand
from gateway.subscriptions.engine import Engine
from gateway.subscriptions.guard import ItemGuard, Visible
from gateway.subscriptions.hints import EventHints
from gateway.subscriptions.matching import Matcher
from gateway.subscriptions.schema import (
    SUB_ID,
    SUGGESTION_ID,
    Created,
    Deleted,
    FeedbackOut,
    FeedbackRequest,
    Listing,
    ListQuery,
    Page,
    StreamQuery,
    SubscriptionOut,
    SubscriptionRequest,
    SuggestionsQuery,
)
from gateway.subscriptions.settings import SubscriptionsSection
from gateway.subscriptions.stream import Streams
from gateway.subscriptions.webhook import Webhooks
from gateway.suggestions.finder import Finder
from gateway.turns.turn import Turn
from vault.audit import AuditLog
from vault.subscriptions import EVENT_HINTS, SubscriptionStore
from vault.webhook_claims import WebhookClaims

DocumentsListener = Callable[[Sequence[str]], Awaitable[None]]


class SubscriptionsFeature:
    name = "subscriptions"

    def __init__(
        self,
        settings: SubscriptionsSection,
        *,
        visible: Visible,
        finder: Callable[[], Finder | None] = lambda: None,
        embedder: Embedder | None = None,
        watch_documents: Callable[[DocumentsListener], None] | None = None,
    ) -> None:
        self.settings = settings
        self.visible = visible
        self.finder = finder
        self.embedder = embedder
        self.watch_documents = watch_documents

    def _notify(self, sub_id: str, webhook: bool) -> None:
        self.streams.notify(sub_id)
        if webhook:
            self.webhooks.wake()

    def contribute(self, c: Contributions) -> None:
        if not self.settings.enabled:
            return
        s, settings = c.services, self.settings
        self.store = store = SubscriptionStore(s.vault)
        self.streams = Streams(store, keepalive_s=settings.stream_keepalive_s)
        self.engine = engine = Engine(
            store=store,
            guard=ItemGuard(store, self.visible),
            matcher=Matcher(self.embedder, settings.topic_threshold),
            clock=s.clock,
            finder=self.finder,
            notify=self._notify,
        )
        audit = AuditLog(s.vault)
        # Replicas share a PostgreSQL vault: each due event is leased to the one POSTing it.
        shared = s.vault.dialect == "postgresql"
        self.webhooks = Webhooks(
            store=store,
            claims=WebhookClaims(
                store,
                owner=s.replica_id or "this process" if shared else None,
                lease_ms=int(settings.webhook_lease_s * 1000),
            ),
            settings=settings,
            clock=s.clock,
            audit=audit,
            on_disabled=lambda sub_id: engine.invalidate(),
        )
        self.ops = ops = SubscriptionOps(
            store=store, engine=engine, streams=self.streams, clock=s.clock, audit=audit,
            private_ok=settings.webhook_private_addresses,
        )  # fmt: skip
        c.background(self.webhooks.run)
        listener = s.hints(EVENT_HINTS)
        self.hints: EventHints | None = None
        if listener is not None:
            self.hints = EventHints(
                listener, streams=self.streams, changed=engine.invalidate, clock=s.clock,
                poll_s=settings.stream_poll_s,
            )  # fmt: skip
            c.background(self.hints.run)
        c.turn_hook(self._on_turn)
        s.memories.added.append(engine.memory_added)
        if self.watch_documents is not None:
            self.watch_documents(engine.documents_changed)
        c.admin(SubscribeCommand(ops).admin_sub())
        sub, sug = {"id": SUB_ID}, {"id": SUGGESTION_ID}
        c.api_route(
            ApiRoute(method="POST", path="/context/subscriptions",
                     summary="Create a context subscription (the webhook secret is shown once)",
                     handler=ops.http_create, body=SubscriptionRequest, status=201,
                     response=Created, errors=(400,)),
            ApiRoute(method="GET", path="/context/subscriptions",
                     summary="The context subscriptions, with their state",
                     handler=ops.http_list, query=ListQuery, response=Listing, errors=()),
            ApiRoute(method="DELETE", path="/context/subscriptions/{id}",
                     summary="Delete a context subscription", handler=ops.http_delete,
                     params=sub, response=Deleted),
            ApiRoute(method="POST", path="/context/subscriptions/{id}/enable",
                     summary="Turn a subscription on again (its failure count restarts)",
                     handler=ops.http_enable, params=sub, response=SubscriptionOut),
            ApiRoute(method="POST", path="/context/subscriptions/{id}/disable",
                     summary="Turn a subscription off (nothing is delivered until enabled)",
                     handler=ops.http_disable, params=sub, response=SubscriptionOut),
            ApiRoute(method="GET", path="/context/suggestions",
                     summary="A subscription's events after a cursor (poll)",
                     handler=ops.http_poll, query=SuggestionsQuery, response=Page),
            ApiRoute(method="POST", path="/context/suggestions/{id}/feedback",
                     summary="Mark a delivered suggestion used or dismissed",
                     handler=ops.http_feedback, body=FeedbackRequest, params=sug,
                     response=FeedbackOut, errors=(404, 409)),
            ApiRoute(method="GET", path="/context/stream",
                     summary="A subscription's events as server-sent events; resume with "
                     "Last-Event-ID (digits, else 400)",
                     stream=ops.http_stream, query=StreamQuery, errors=(400, 404)),
        )  # fmt: skip

    async def _on_turn(self, turn: Turn) -> None:
        if turn.scope is None or turn.command is not None or turn.replay:
            return
        await self.engine.message(turn.scope)
