"""Webhook delivery: the queued event rows POSTed to their subscription's URL, signed, retried.

Each body is the event's JSON exactly as stored, signed `X-Iris-Signature: sha256=<hex>` with
HMAC-SHA256 of the body under the subscription's secret, and carries the event's idempotency
key (`X-Iris-Idempotency-Key`, also in the body) so a receiver can drop a repeat: a response
lost after the receiver got it means the same event comes again. A 2xx is delivered; anything
else (a refused connection, a timeout, a 5xx, a 4xx) is a failed attempt, retried with
exponential backoff on the app's clock up to `max_attempts`; a subscription that fails
`max_failures` attempts in a row is disabled, with the reason on the subscription and in the
audit log. One subscription's failures delay nobody else: a due batch is sent concurrently.

The job waits for whichever comes first: a new event (`wake`) or the next retry's time. With
replicas sharing a PostgreSQL vault, the due events are claimed (`vault/webhook_claims.py`):
every replica runs this job, each event is POSTed by the one that claimed it, which renews its
lease every third of `webhook_lease_s` while it runs. An event whose replica died is sent by
another once the lease has run out — with the same idempotency key, since the first POST may
have arrived before the crash.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import Callable

import aiohttp

from gateway.core.errors import VaultError
from gateway.core.ports import Clock
from gateway.subscriptions.addresses import PublicResolver, url_problem
from gateway.subscriptions.settings import SubscriptionsSection
from vault.audit import AuditLog, Outcome
from vault.subscriptions import EventRow, SubscriptionRow, SubscriptionStore
from vault.webhook_claims import WebhookClaims

log = logging.getLogger(__name__)

SIGNATURE = "X-Iris-Signature"
IDEMPOTENCY = "X-Iris-Idempotency-Key"
BATCH = 50


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def body_of(event: EventRow) -> bytes:
    return json.dumps(event.payload, separators=(",", ":"), ensure_ascii=False).encode()


class Webhooks:
    def __init__(
        self,
        *,
        store: SubscriptionStore,
        claims: WebhookClaims,
        settings: SubscriptionsSection,
        clock: Clock,
        audit: AuditLog,
        on_disabled: Callable[[str], None] = lambda sub_id: None,
    ) -> None:
        self.store = store
        self.claims = claims
        self.settings = settings
        self.clock = clock
        self.audit = audit
        self.on_disabled = on_disabled
        self._wake = asyncio.Event()
        self.delivered = 0  # attempts that got a 2xx (for tests and the bench)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Deliver until cancelled; with replicas, also keep this replica's leases."""
        timeout = aiohttp.ClientTimeout(total=self.settings.webhook_timeout_s)
        private_ok = self.settings.webhook_private_addresses
        connector = aiohttp.TCPConnector(resolver=None if private_ok else PublicResolver())
        async with (
            aiohttp.ClientSession(timeout=timeout, connector=connector) as http,
            asyncio.TaskGroup() as tg,
        ):
            if self.claims.owner is not None:
                tg.create_task(self._keep_leases(), name="webhook leases")
            while True:
                self._wake.clear()
                await self.deliver_due(http)
                await self._wait(await self.claims.next_due_ms())

    async def _keep_leases(self) -> None:
        """Every third of the lease: renew the hold on the events being POSTed here."""
        while True:
            await self.clock.sleep(self.claims.lease_ms / 3000)
            try:
                await self.claims.renew(self.clock.now_ms())
            except VaultError as exc:  # the next round tries again; meanwhile leases may lapse
                log.warning("renewing the webhook leases failed: %s", type(exc).__name__)

    async def _wait(self, when_ms: int | None) -> None:
        waits: list[asyncio.Future[object]] = [asyncio.ensure_future(self._wake.wait())]
        if when_ms is not None:
            waits.append(asyncio.ensure_future(self.clock.sleep_until(when_ms)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def deliver_due(self, http: aiohttp.ClientSession) -> None:
        while due := await self.claims.claim(self.clock.now_ms(), BATCH):
            await asyncio.gather(*(self._attempt(http, e, s) for e, s in due))
            if len(due) < BATCH:
                return

    async def _attempt(
        self, http: aiohttp.ClientSession, event: EventRow, sub: SubscriptionRow
    ) -> None:
        assert sub.url is not None and sub.secret is not None
        body = body_of(event)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE: sign(sub.secret, body),
            IDEMPOTENCY: str(event.payload["idempotency_key"]),
            "User-Agent": "iris-subscriptions/1",
        }
        problem = url_problem(sub.url, private_ok=self.settings.webhook_private_addresses)
        try:
            if problem is not None:  # made before the check, or with the setting on then
                ok, reason = False, f"not sent: {problem}"
            else:
                async with http.post(
                    sub.url, data=body, headers=headers, allow_redirects=False
                ) as res:
                    ok, reason = 200 <= res.status < 300, f"HTTP {res.status}"
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            ok, reason = False, type(exc).__name__
        holder = self.claims.owner
        if ok:
            await self.store.delivered(event.seq, sub.id, holder=holder)
            self.delivered += 1
            return
        attempts = event.attempts + 1
        retry_at = None
        if attempts < self.settings.webhook_max_attempts:
            delay = min(
                self.settings.webhook_backoff_base_s * 2 ** (attempts - 1),
                self.settings.webhook_backoff_max_s,
            )
            retry_at = self.clock.now_ms() + int(delay * 1000)
        disabled = await self.store.failed(
            event.seq,
            sub.id,
            retry_at_ms=retry_at,
            max_failures=self.settings.webhook_max_failures,
            reason=f"webhook failed {self.settings.webhook_max_failures} times in a row "
            f"(last: {reason})",
            holder=holder,
        )
        log.info("webhook of %s failed (%s), attempt %d", sub.id, reason, attempts)
        if disabled:
            await self.audit.record(
                actor="subscriptions",
                via="webhook",
                action="subscription disabled",
                args={"id": sub.id},
                outcome=Outcome.ERROR,
                result=f"{self.settings.webhook_max_failures} failed deliveries in a row, "
                f"last: {reason}",
                now_ms=self.clock.now_ms(),
            )
            self.on_disabled(sub.id)
