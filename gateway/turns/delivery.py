"""Delivery: the outbox row first, then the channel call; retries that never hold a chat long.

`deliver()` writes the outbox row (already `sending`, attempt 1) before touching the network,
so a crash mid-send leaves a row that startup recovery turns into `uncertain` instead of
silently resending. What the channel says decides the rest (`gateway/core/errors.py`):

- sent: the row is `sent`, and `on_sent` commits with it (the reply enters the history);
- `DeliveryTransient` — the request never reached the platform (a failed connect, no free
  connection) or the platform asked us to come back (a 429 with Retry-After): retried, with
  exponential backoff or the platform's Retry-After, until `max_attempts` and, for replies,
  until it is `give_up_after_s` old (a platform outage of a few minutes loses nothing), then
  `failed`;
- `DeliveryUncertain` — it may have arrived: `uncertain`, never resent (a duplicate is worse
  than a visible gap); an exception we did not map is treated the same;
- `DeliveryPermanent` — `failed` at once; `ChatUnreachable` also marks the chat unreachable.

A retry may wait in place only while the caller's total wait stays under
`max_inline_wait_s`. Beyond that the row stays `pending` with its next attempt time and the
call returns `QUEUED`: the turn ends, frees its chat lock and its router slot, and the
background resend (`run()`) sends the row when it is due. A long Retry-After therefore never
freezes a chat, and many of them never freeze the gateway. Order within a chat holds because a
new message to a chat that still has an open (pending or sending) row is written `pending`
behind it (`QUEUED` at once), and the resend only ever sends the first open row of each chat.
`on_sent` of a queued row is kept in memory (after a restart the row is sent without it). A
reply joins its session's history (`History`, kept in the row) when it is sent or settles
`uncertain` — or, when it is queued, at once: it is what was answered, and the chat's next turn,
which no longer waits for it, must not see the question unanswered and answer it again (and the
history keeps the order of question and answer). One queued that fails in the end stays there.

`deliver_pending()` (proactive sends, whose rows another component writes) keeps its retries
in place: its caller records the item's outcome from the result.

Every outcome is counted (`iris_delivery_attempts_total`, `iris_delivery_deferred_total`,
`iris_outbound_messages_total`), each uncertain or failed send is logged once, in one line,
and `health` (`gateway/turns/delivery_health.py`) marks a channel that cannot deliver until it
delivers again.

Size: a little over 400 lines; the inline attempts, the background resend and (with replicas)
the outbox leases share one piece of state — which rows this process is working on.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
from gateway.turns.delivery_health import DeliveryHealth
from vault.batch import SyncBody
from vault.outbox import History, Outbox, OutboxRow, WaitingRow

log = logging.getLogger(__name__)

# Rows the background resend sends at once (each in a different chat).
RESEND_CONCURRENCY = 8
# A `pending` row nobody here touched was written by a component about to send it itself (a
# proactive send); the resend takes it only if that never happens.
ORPHAN_AFTER_MS = 60_000
# After a pass that failed outside any send (the vault), the resend tries again this soon.
RETRY_PASS_MS = 5_000


class DeliveryStatus(StrEnum):
    """How one delivery call ended: the outbox row's final status; `duplicate` when another
    call owns the row (same idempotency key); `queued` when the row waits for the background
    resend. Also the `status` label of `iris_outbound_messages_total` (never `queued`: the
    row is counted when it settles)."""

    SENT = "sent"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    DUPLICATE = "duplicate"
    QUEUED = "queued"


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    status: DeliveryStatus
    outbox_id: int
    platform_ids: tuple[str, ...] = ()

    @property
    def delivered(self) -> bool:
        return self.status is DeliveryStatus.SENT


# Past `max_attempts` a reply is retried until `give_up_after_s`; each retry waits at least
# this long, whatever the backoff settings or a platform's Retry-After of 0 say.
LATE_RETRY_MIN_S = 1.0


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
        max_inline_wait_s: float = 5.0,
        give_up_after_s: float = 3600.0,
        resend_concurrency: int = RESEND_CONCURRENCY,
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
        self.max_inline_wait_s = max_inline_wait_s
        self.give_up_after_s = give_up_after_s
        self.unserved: dict[str, int] = {}  # channel -> replies waiting for it, found at start
        self.resend_concurrency = resend_concurrency
        self.on_unreachable = on_unreachable
        self.health = DeliveryHealth(clock.now_ms, channels)
        self.metrics.gauge(
            "iris_delivery_ok",
            "1 while a channel delivers, 0 from a send that ended uncertain, failed or put "
            "off until the next one it delivers.",
            ("channel",),
            self.health.gauge,
        )
        self._held: set[int] = set()  # rows an attempt in this process is working on
        self._queued: set[int] = set()  # rows this process left to the background resend
        self._after_sent: dict[int, SyncBody[None]] = {}  # their `on_sent`
        self._leftovers_up_to = 0  # rows up to this id were written before this process
        self._unexpected: set[type[BaseException]] = set()  # logged with a traceback once
        self._wake = asyncio.Event()

    async def deliver(
        self,
        out: Outbound,
        *,
        on_sent: SyncBody[None] | None = None,
        history: History | None = None,
    ) -> DeliveryResult:
        """Send `out` (or queue it behind an earlier message to its chat that still waits);
        `on_sent` runs in the transaction that marks the row sent; with `history` the text
        joins that session once sent or uncertain, in this process or the next."""
        row, behind = await self.outbox.enqueue_in_order(out, self.clock.now_ms(), history)
        if not row.created:
            return DeliveryResult(DeliveryStatus.DUPLICATE, row.id)
        if behind:
            log.debug("outbox #%d waits behind an earlier message to %s", row.id, out.chat.key)
            await self.outbox.join_history(row.id, self.clock.now_ms())
            self._leave_to_resend(row.id, out.chat.channel, on_sent, "behind")
            return DeliveryResult(DeliveryStatus.QUEUED, row.id)
        with self._holding(row.id):
            return await self._attempts(row, on_sent, self.max_inline_wait_s)

    async def deliver_pending(
        self,
        row_id: int,
        out: Outbound,
        *,
        on_sent: SyncBody[None] | None = None,
    ) -> DeliveryResult:
        """Send a row another component wrote as `pending` (in its own transaction), retrying
        in place; `on_sent` runs in the transaction that marks the row sent."""
        with self._holding(row_id):
            if not await self.outbox.mark_sending(row_id, self.clock.now_ms()):
                return DeliveryResult(DeliveryStatus.DUPLICATE, row_id)
            row = OutboxRow(id=row_id, outbound=out, status="sending", attempts=1)
            return await self._attempts(row, on_sent, math.inf)

    async def recover(self) -> None:
        """Both steps of startup recovery, in order (the app runs the second in `run()`)."""
        await self.settle_interrupted()
        await self.resend_pending()

    async def settle_interrupted(self) -> int:
        """Rows a crash left `sending` may have been delivered: they become uncertain. Rows
        still `pending` from before are the resend's to send."""
        uncertain = await self.outbox.recover_after_crash(
            self.clock.now_ms(), channels=tuple(self.channels)
        )
        if uncertain:
            log.warning(
                "%d outgoing message(s) were interrupted mid-send: marked uncertain", uncertain
            )
        if self.outbox.owner is None:  # alone: every row written before now is a leftover
            self._leftovers_up_to = await self.outbox.last_id()
        waiting = await self.outbox.waiting_by_channel()
        self.unserved = {c: n for c, n in sorted(waiting.items()) if c not in self.channels}
        for channel, count in self.unserved.items():
            log.warning("%d repl%s wait for channel %r, which this process does not run",
                        count, "y" if count == 1 else "ies", channel)  # fmt: skip
        return uncertain

    def unserved_line(self) -> str | None:
        """The `/healthz` `degraded` line while replies written earlier wait for a channel this
        process does not run (turned off since, or run by another process), as found at start."""
        if not self.unserved:
            return None
        waiting = ", ".join(f"{n} for {c}" for c, n in self.unserved.items())
        return f"outbox: replies wait for channels not running here ({waiting})"

    # --- the background resend ----------------------------------------------------------

    async def run(self) -> None:
        """The background resend, until cancelled: a pass at once, whenever a row is left to
        it, and when the next waiting row is due. With replicas (an outbox `owner`), also
        keeps this replica's leases and takes over the rows of replicas that died."""
        async with asyncio.TaskGroup() as tg:
            if self.outbox.owner is not None:
                tg.create_task(self._keep_leases(), name="outbox leases")
            await self._resend_loop()

    async def _keep_leases(self) -> None:
        """Every third of the lease: renew this replica's rows; settle `uncertain` the rows
        whose holder's lease ran out mid-send; wake the resend for the waiting ones it left."""
        while True:
            await self.clock.sleep(self.outbox.lease_ms / 3000)
            now = self.clock.now_ms()
            try:
                await self.outbox.renew(now)
                settled = await self.outbox.recover_after_crash(
                    now, at_start=False, channels=tuple(self.channels)
                )
            except Exception as exc:  # the vault may be away: the next round tries again
                log.warning("renewing the outbox leases failed: %s", type(exc).__name__)
                continue
            if settled:
                log.warning(
                    "%d outgoing message(s) of a stopped replica were interrupted mid-send: "
                    "marked uncertain", settled,
                )  # fmt: skip
            self._wake.set()

    async def _resend_loop(self) -> None:
        while True:
            self._wake.clear()  # before the pass: a row left to us during it starts another
            try:
                next_ms = await self.resend_pending()
            except Exception:
                log.exception("the background resend failed; trying again shortly")
                next_ms = self.clock.now_ms() + RETRY_PASS_MS
            await self._wait(next_ms)

    async def resend_pending(self) -> int | None:
        """Send every waiting row that is due, each chat's in order, until none is; one failing
        row stops no other. Returns when the next waiting row is due (None: none waits)."""
        slots = asyncio.Semaphore(self.resend_concurrency)
        broken: set[int] = set()  # rows whose resend failed outside the send, this call
        while True:
            now, served = self.clock.now_ms(), tuple(self.channels)  # the others' rows wait
            ready: list[OutboxRow] = []
            next_ms = now + RETRY_PASS_MS if broken else None
            for waiting in await self.outbox.first_waiting(now_ms=now, channels=served):
                at = self._due_ms(waiting)
                if at is None or waiting.row.id in broken:
                    continue
                if at <= now:
                    ready.append(waiting.row)
                elif next_ms is None or at < next_ms:
                    next_ms = at
            if not ready:
                return next_ms
            async with asyncio.TaskGroup() as tg:
                for row in ready:
                    tg.create_task(self._resend(row, slots, broken))

    def _due_ms(self, waiting: WaitingRow) -> int | None:
        row = waiting.row
        if row.id in self._held:
            return None  # an attempt here is on it; it leaves the row to us if it must wait
        if waiting.touched or row.id in self._queued or row.id <= self._leftovers_up_to:
            return waiting.next_attempt_ms
        return max(waiting.next_attempt_ms, waiting.created_ms + ORPHAN_AFTER_MS)

    async def _resend(self, row: OutboxRow, slots: asyncio.Semaphore, broken: set[int]) -> None:
        async with slots:
            try:
                with self._holding(row.id):
                    if not await self.outbox.mark_sending(row.id, self.clock.now_ms()):
                        return  # sent or settled meanwhile (or held by another replica)
                    claimed = OutboxRow(
                        id=row.id, outbound=row.outbound, status="sending",
                        attempts=row.attempts + 1,
                    )  # fmt: skip
                    await self._attempts(claimed, self._after_sent.get(row.id), 0.0)
            except Exception:
                broken.add(row.id)
                log.exception("could not resend outbox #%d", row.id)

    async def _wait(self, until_ms: int | None) -> None:
        waits: set[asyncio.Future[object]] = {asyncio.create_task(self._wake.wait())}
        if until_ms is not None:
            waits.add(asyncio.create_task(self.clock.sleep_until(until_ms)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
            await asyncio.wait(waits)

    # --- one row, until it settles or waits ----------------------------------------------

    @contextmanager
    def _holding(self, row_id: int) -> Iterator[None]:
        self._held.add(row_id)
        try:
            yield
        finally:
            self._held.discard(row_id)

    def _leave_to_resend(
        self, row_id: int, channel: str, on_sent: SyncBody[None] | None, reason: str
    ) -> None:
        self._queued.add(row_id)
        if on_sent is not None:
            self._after_sent[row_id] = on_sent
        self.metrics.delivery_deferred.inc(channel, reason)
        self._wake.set()

    async def _attempts(
        self, row: OutboxRow, on_sent: SyncBody[None] | None, max_wait_s: float
    ) -> DeliveryResult:
        try:
            result = await self._attempt_until_settled(row, on_sent, max_wait_s)
        except asyncio.CancelledError:
            # Cut off (the drain at shutdown): it may have gone out. Settled now, the row
            # holds up no later message to its chat; one still waiting stays pending.
            log.warning(
                "outbox #%d to %s: attempt cut off; if under way, marked uncertain",
                row.id, row.outbound.chat.key,
            )  # fmt: skip
            self.outbox.mark_uncertain_soon(
                row.id, "cancelled during the send", self.clock.now_ms()
            )
            raise
        if result.status is not DeliveryStatus.QUEUED:
            self._queued.discard(row.id)
            self._after_sent.pop(row.id, None)
            out = row.outbound
            self.metrics.outbound.inc(out.chat.channel, out.kind.value, result.status)
        return result

    async def _attempt_until_settled(
        self, row: OutboxRow, on_sent: SyncBody[None] | None, max_wait_s: float
    ) -> DeliveryResult:
        out = row.outbound
        name = out.chat.channel
        channel = self.channels.get(name)
        if channel is None:
            log.warning("outbox #%d: no channel %r is running; not sent", row.id, name)
            await self.outbox.mark_failed(row.id, f"no channel {name!r} is running")
            return DeliveryResult(DeliveryStatus.FAILED, row.id)
        attempt, waited = row.attempts, 0.0
        while True:
            try:
                receipt = await channel.send(out)
            except DeliveryTransient as exc:
                self._count(name, "transient")
                if attempt >= self.max_attempts and await self._past_retrying(row, max_wait_s):
                    reason = f"gave up after {attempt} attempts: {exc}"
                    return await self._failed(row, reason, channel_trouble=True)
                delay = self._backoff(attempt, exc.retry_after_s)
                if attempt >= self.max_attempts:  # retried for up to an hour: never a hot loop
                    delay = max(delay, LATE_RETRY_MIN_S)
                await self.outbox.mark_retry(
                    row.id, str(exc), self.clock.now_ms() + int(delay * 1000), exc.sent
                )
                if len(exc.sent) > len(out.sent_chunks):  # the next attempt sends the rest
                    out = replace(out, sent_chunks=exc.sent)
                if waited + delay > max_wait_s:
                    # Before the resend is woken, with no wait between: it skips a held row.
                    await self.outbox.join_history(row.id, self.clock.now_ms())
                    self._put_off(row, exc, delay, on_sent)
                    return DeliveryResult(DeliveryStatus.QUEUED, row.id)
                await self.clock.sleep(delay)
                waited += delay
                if not await self.outbox.mark_sending(row.id, self.clock.now_ms()):
                    return DeliveryResult(DeliveryStatus.DUPLICATE, row.id)
                attempt += 1
                continue
            except ChatUnreachable as exc:
                self._count(name, "unreachable")
                log.info("outbox #%d not sent: %s is unreachable (%s)", row.id, out.chat.key, exc)
                await self.outbox.mark_failed(row.id, f"unreachable: {exc}")
                if self.on_unreachable is not None:
                    await self.on_unreachable(out.chat)
                return DeliveryResult(DeliveryStatus.FAILED, row.id)
            except DeliveryPermanent as exc:
                self._count(name, "permanent")
                return await self._failed(row, str(exc), channel_trouble=False)
            except DeliveryUncertain as exc:
                self._count(name, "uncertain")
                return await self._uncertain(row, str(exc))
            except Exception as exc:
                # A bug or an unmapped SDK error: we cannot tell whether it went out.
                self._count(name, "error")
                first = type(exc) not in self._unexpected
                self._unexpected.add(type(exc))
                log.error(
                    "outbox #%d to %s: unexpected %s while sending",
                    row.id, out.chat.key, type(exc).__name__, exc_info=exc if first else None,
                )  # fmt: skip
                return await self._uncertain(row, f"unexpected {type(exc).__name__}")
            self._count(name, "sent")
            await self.outbox.mark_sent(
                row.id, receipt.platform_message_ids, self.clock.now_ms(), also=on_sent
            )
            self.health.delivered(name)
            return DeliveryResult(DeliveryStatus.SENT, row.id, receipt.platform_message_ids)

    def _put_off(
        self,
        row: OutboxRow,
        exc: DeliveryTransient,
        delay: float,
        on_sent: SyncBody[None] | None,
    ) -> None:
        name = row.outbound.chat.channel
        self.health.cannot_deliver(name, f"{exc}; next attempt in {delay:.0f} s")
        log.info(
            "outbox #%d to %s: %s; the background resend tries again in %.0f s",
            row.id, row.outbound.chat.key, exc, delay,
        )  # fmt: skip
        reason = "retry_after" if exc.retry_after_s is not None else "backoff"
        self._leave_to_resend(row.id, name, on_sent, reason)

    async def _failed(
        self, row: OutboxRow, reason: str, *, channel_trouble: bool
    ) -> DeliveryResult:
        log.warning("outbox #%d to %s failed: %s", row.id, row.outbound.chat.key, reason)
        await self.outbox.mark_failed(row.id, reason)
        if channel_trouble:
            self.health.cannot_deliver(
                row.outbound.chat.channel, f"a send failed: {reason}", lapses=True
            )
        return DeliveryResult(DeliveryStatus.FAILED, row.id)

    async def _uncertain(self, row: OutboxRow, reason: str) -> DeliveryResult:
        log.warning(
            "outbox #%d to %s may or may not have arrived (not resent): %s",
            row.id, row.outbound.chat.key, reason,
        )  # fmt: skip
        await self.outbox.mark_uncertain(row.id, reason, self.clock.now_ms())
        self.health.cannot_deliver(
            row.outbound.chat.channel, f"a send was uncertain: {reason}", lapses=True
        )
        return DeliveryResult(DeliveryStatus.UNCERTAIN, row.id)

    def _count(self, channel: str, result: str) -> None:
        self.metrics.delivery_attempts.inc(channel, result)

    async def _past_retrying(self, row: OutboxRow, max_wait_s: float) -> bool:
        """After `max_attempts`: whether to give up. A reply (it can wait in the outbox) is
        retried until it is `give_up_after_s` old; a send that retries in place (a proactive
        one: `max_wait_s` unbounded) gives up at once, its item records the failure."""
        if math.isinf(max_wait_s):
            return True
        created = await self.outbox.created_ms(row.id)
        return created is None or self.clock.now_ms() - created >= self.give_up_after_s * 1000

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return max(0.0, retry_after_s)
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))
