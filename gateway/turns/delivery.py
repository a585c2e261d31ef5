"""Delivery: outbox row first, then the channel call, with retries for transient failures.

`deliver()` writes the outbox row (already `sending`, attempt 1) before touching the network,
so a crash mid-send leaves a row that startup recovery turns into `uncertain` instead of
silently resending. Transient failures (rate limits, network) are retried in place with
exponential backoff — honouring the platform's Retry-After — which keeps replies in order
within a chat; after `max_attempts` the row is `failed`. Permanent failures fail at once;
`ChatUnreachable` (e.g. the user blocked the bot) also marks the chat unreachable. Each call
ends in one `DeliveryStatus`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gateway.core.errors import (
    ChatUnreachable,
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
)
from gateway.core.messages import ChatRef, Outbound
from gateway.core.metrics import Metrics
from gateway.core.ports import Channel, Clock
from vault.batch import SyncBody
from vault.outbox import Outbox, OutboxRow

log = logging.getLogger(__name__)


class DeliveryStatus(StrEnum):
    """How one delivery call ended: the outbox row's final status, or `duplicate` when another
    call owns the row (same idempotency key). Also the `status` label of
    `iris_outbound_messages_total`."""

    SENT = "sent"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    status: DeliveryStatus
    outbox_id: int
    platform_ids: tuple[str, ...] = ()

    @property
    def delivered(self) -> bool:
        return self.status is DeliveryStatus.SENT


class Delivery:
    def __init__(
        self,
        *,
        outbox: Outbox,
        channels: Mapping[str, Channel],
        clock: Clock,
        max_attempts: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        on_unreachable: Callable[[ChatRef], Awaitable[None]] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.outbox = outbox
        self.channels = channels
        self.clock = clock
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.on_unreachable = on_unreachable

    async def deliver(
        self, out: Outbound, *, on_sent: SyncBody[None] | None = None
    ) -> DeliveryResult:
        """Send `out`; `on_sent` runs in the transaction that marks the row sent."""
        row = await self.outbox.enqueue(out, self.clock.now_ms(), status="sending")
        if not row.created:
            return DeliveryResult(DeliveryStatus.DUPLICATE, row.id)
        return await self._attempts(row, on_sent)

    async def deliver_pending(
        self,
        row_id: int,
        out: Outbound,
        *,
        on_sent: SyncBody[None] | None = None,
    ) -> DeliveryResult:
        """Send a row another component wrote as `pending` (in its own transaction);
        `on_sent` runs in the transaction that marks the row sent."""
        if not await self.outbox.mark_sending(row_id):
            return DeliveryResult(DeliveryStatus.DUPLICATE, row_id)
        return await self._attempts(
            OutboxRow(id=row_id, outbound=out, status="sending", attempts=1), on_sent
        )

    async def recover(self) -> None:
        """Both steps of startup recovery, in order (the app runs the second in the background)."""
        await self.settle_interrupted()
        await self.resend_pending()

    async def settle_interrupted(self) -> int:
        """Rows a crash left `sending` may have been delivered: they become uncertain."""
        uncertain = await self.outbox.recover_after_crash()
        if uncertain:
            log.warning(
                "%d outgoing message(s) were interrupted mid-send: marked uncertain", uncertain
            )
        return uncertain

    async def resend_pending(self) -> None:
        """Send rows that were written but never attempted; one failing row stops no other."""
        for row in await self.outbox.due(self.clock.now_ms()):
            try:
                await self.deliver_pending(row.id, row.outbound)
            except Exception:
                log.exception("could not resend outbox #%d", row.id)

    async def _attempts(
        self, row: OutboxRow, on_sent: SyncBody[None] | None = None
    ) -> DeliveryResult:
        result = await self._attempt_until_settled(row, on_sent)
        out = row.outbound
        self.metrics.outbound.inc(out.chat.channel, out.kind.value, result.status)
        return result

    async def _attempt_until_settled(
        self, row: OutboxRow, on_sent: SyncBody[None] | None
    ) -> DeliveryResult:
        out = row.outbound
        channel = self.channels.get(out.chat.channel)
        if channel is None:
            await self.outbox.mark_failed(row.id, f"no channel {out.chat.channel!r} is running")
            return DeliveryResult(DeliveryStatus.FAILED, row.id)
        attempt = row.attempts
        while True:
            try:
                receipt = await channel.send(out)
            except DeliveryTransient as exc:
                if attempt >= self.max_attempts:
                    log.warning(
                        "giving up on outbox #%d after %d attempts: %s", row.id, attempt, exc
                    )
                    await self.outbox.mark_failed(row.id, f"transient: {exc}")
                    return DeliveryResult(DeliveryStatus.FAILED, row.id)
                delay = self._backoff(attempt, exc.retry_after_s)
                await self.outbox.mark_retry(
                    row.id, str(exc), self.clock.now_ms() + int(delay * 1000)
                )
                await self.clock.sleep(delay)
                if not await self.outbox.mark_sending(row.id):
                    return DeliveryResult(DeliveryStatus.DUPLICATE, row.id)
                attempt += 1
                continue
            except ChatUnreachable as exc:
                await self.outbox.mark_failed(row.id, f"unreachable: {exc}")
                if self.on_unreachable is not None:
                    await self.on_unreachable(out.chat)
                return DeliveryResult(DeliveryStatus.FAILED, row.id)
            except DeliveryPermanent as exc:
                log.warning("outbox #%d failed permanently: %s", row.id, exc)
                await self.outbox.mark_failed(row.id, str(exc))
                return DeliveryResult(DeliveryStatus.FAILED, row.id)
            except DeliveryUncertain as exc:
                await self.outbox.mark_uncertain(row.id, str(exc))
                return DeliveryResult(DeliveryStatus.UNCERTAIN, row.id)
            except Exception as exc:
                # A bug or an unmapped SDK error: we cannot tell whether it went out.
                await self.outbox.mark_uncertain(row.id, f"unexpected {type(exc).__name__}")
                self.metrics.outbound.inc(
                    out.chat.channel, out.kind.value, DeliveryStatus.UNCERTAIN
                )
                raise DeliveryUncertain(f"send failed unexpectedly: {type(exc).__name__}") from exc
            await self.outbox.mark_sent(
                row.id, receipt.platform_message_ids, self.clock.now_ms(), also=on_sent
            )
            return DeliveryResult(DeliveryStatus.SENT, row.id, receipt.platform_message_ids)

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return max(0.0, retry_after_s)
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))
