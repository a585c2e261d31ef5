"""The pulse engine: a fast loop executing due items and a slow loop scanning for patterns.

Fast loop (every `poll_interval_s`, or sooner when woken by a new intent): reconcile rows left
`delivering` by an earlier run, expire items that missed their time by more than the maximum
age, claim at most `max_per_tick` due items with a lease, and execute them: up to `concurrency`
chats at a time, each chat's items one by one in claim order (quotas stay exact: they are
re-checked in the transaction that writes the outbox row). Items that came due while Iris was
down run once (recorded as late), never more than `max_per_tick` at a time. Slow loop: the
passive scan on the `scan_cron` schedule (UTC).

Cancellation is a crash as far as the data is concerned: whatever step an item was in, the
lease expires and the next run either re-executes it (nothing was written yet), finishes it
from the outbox row's outcome, or marks it `uncertain` (the send may have happened). Nothing
is sent twice. `run()` is cancellable and holds no flags; time comes from the `Clock` port.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter, deque
from dataclasses import dataclass
from datetime import UTC, datetime

from croniter import croniter

from gateway.core.messages import Outbound, OutboundKind
from gateway.core.ports import Clock
from proactive.execute import Executor
from proactive.outcome import Outcome
from proactive.policy import DAY_MS, HOUR_MS
from proactive.settings import ProactiveSection
from proactive.tick import TickCache
from vault.db import Vault
from vault.proactive.scan import ScanResult, scan
from vault.proactive.store import Delivering, Item, ItemStatus, ProactiveStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    poll_interval_s: float = 60.0
    scan_cron: str = "0 */6 * * *"
    max_per_tick: int = 20
    lease_ms: int = 300_000
    max_age_ms: int = 7 * DAY_MS
    dormancy_ms: int = 7 * DAY_MS
    unanswered_ms: int = 24 * HOUR_MS
    drop_ratio: float = 0.3
    # Chats whose items run at the same time (one chat's items always run in order).
    concurrency: int = 8

    @classmethod
    def from_section(cls, s: ProactiveSection) -> EngineConfig:
        return cls(
            poll_interval_s=s.poll_interval_s,
            scan_cron=s.scan_cron,
            max_per_tick=s.max_per_tick,
            lease_ms=int(s.lease_s * 1000),
            max_age_ms=int(s.max_age_days * DAY_MS),
            dormancy_ms=int(s.dormancy_days * DAY_MS),
            unanswered_ms=int(s.unanswered_hours * HOUR_MS),
            drop_ratio=s.engagement_drop_ratio,
            concurrency=s.concurrency,
        )


@dataclass(frozen=True, slots=True)
class TickReport:
    claimed: int
    expired_unclaimed: int
    reconciled: int
    outcomes: dict[Outcome, int]


class Engine:
    def __init__(
        self,
        *,
        vault: Vault,
        store: ProactiveStore,
        executor: Executor,
        clock: Clock,
        config: EngineConfig,
        name: str = "engine",
    ) -> None:
        self.vault = vault
        self.store = store
        self.executor = executor
        self.clock = clock
        self.config = config
        self.name = name
        self._run_id = uuid.uuid4().hex[:8]
        self._ticks = 0
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Run the next tick now (a new intent may be due before the next poll)."""
        self._wake.set()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._fast_loop(), name=f"{self.name} pulse")
            tg.create_task(self._slow_loop(), name=f"{self.name} scan")

    async def _fast_loop(self) -> None:
        while True:
            # Cleared before the tick, not after: a wake() that arrives during the tick
            # (a new intent, an admin's "fire") must lead to another tick right away.
            self._wake.clear()
            try:
                await self.tick()
            except Exception:  # a failing tick must not stop follow-ups for good
                log.exception("proactive tick failed; retrying at the next poll")
            await self._wait(self.config.poll_interval_s)

    async def _wait(self, seconds: float) -> None:
        sleeper = asyncio.create_task(self.clock.sleep(seconds))
        woken = asyncio.create_task(self._wake.wait())
        try:
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, woken):
                task.cancel()
            await asyncio.wait({sleeper, woken})

    async def _slow_loop(self) -> None:
        while True:
            now = datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC)
            nxt = croniter(self.config.scan_cron, now).get_next(datetime)
            await self.clock.sleep_until(int(nxt.timestamp() * 1000))
            try:
                found = await self.scan()
                log.info("proactive scan: %d new trigger(s)", found.total)
            except Exception:
                log.exception("proactive scan failed; retrying at the next scheduled time")

    async def scan(self) -> ScanResult:
        return await scan(
            self.vault,
            now_ms=self.clock.now_ms(),
            dormancy_ms=self.config.dormancy_ms,
            unanswered_ms=self.config.unanswered_ms,
            max_age_ms=self.config.max_age_ms,
            drop_ratio=self.config.drop_ratio,
        )

    async def tick(self) -> TickReport:
        self._ticks += 1
        token = f"{self.name}:{self._run_id}:{self._ticks}"
        reconciled = await self.reconcile(token)
        now = self.clock.now_ms()
        next_due = await self.store.next_due_ms()
        if next_due is None or next_due > now:  # the common idle tick: reads only
            return TickReport(0, 0, reconciled, {})
        expired = await self.store.expire_stale(now_ms=now, cutoff_ms=now - self.config.max_age_ms)
        items = await self.store.claim(
            now_ms=now, lease_ms=self.config.lease_ms, limit=self.config.max_per_tick, token=token
        )
        outcomes: Counter[Outcome] = Counter()
        tick = self.executor.new_tick()
        await self.executor.prefetch(tick, items)
        chats: dict[int, list[Item]] = {}
        for item in items:  # claim order within a chat is kept
            chats.setdefault(item.chat_pk, []).append(item)
        queue = deque(chats.values())

        async def worker() -> None:
            while queue:
                for item in queue.popleft():
                    outcomes[await self._execute(item, tick)] += 1

        async with asyncio.TaskGroup() as tg:
            for _ in range(min(max(1, self.config.concurrency), len(queue))):
                tg.create_task(worker())
        return TickReport(len(items), expired, reconciled, dict(outcomes))

    async def _execute(self, item: Item, tick: TickCache) -> Outcome:
        try:
            return await self.executor.process(item, tick)
        except Exception:
            log.exception("%s: execution failed", item.key)
            failed = await self.store.finish(
                item, ItemStatus.FAILED, "internal error during execution", self.clock.now_ms()
            )
            return Outcome.FAILED if failed else Outcome.LOST

    async def reconcile(self, token: str) -> int:
        """Finish `delivering` rows: from their outbox outcome, or after their lease expired."""
        done = 0
        for row in await self.store.delivering():
            now = self.clock.now_ms()
            if row.outbox_status in ("sent", "failed", "uncertain"):
                reason = {
                    "sent": "sent",
                    "failed": "delivery failed",
                    "uncertain": "delivery outcome unknown (interrupted send)",
                }[row.outbox_status]
                if await self.store.complete_delivery(
                    row.item, ItemStatus(row.outbox_status), reason, row.text, now
                ):
                    done += 1
            elif row.lease_until <= now:
                done += await self._take_over(row, token, now)
        return done

    async def _take_over(self, row: Delivering, token: str, now: int) -> int:
        item = await self.store.take_over(row.item, token, now + self.config.lease_ms, now)
        if item is None:
            return 0
        if row.outbox_status == "sending":
            await self.store.interrupted_send(row.outbox_id, now)
            reason = "delivery outcome unknown (interrupted send)"
            await self.store.complete_delivery(item, ItemStatus.UNCERTAIN, reason, row.text, now)
            return 1
        # Written but never attempted (the run stopped between commit and send): send it now.
        # (Like the outbox's own startup recovery, this does not re-check quiet hours: the
        # window is the few microseconds between that commit and the send.)
        out = Outbound(
            chat=item.chat,
            text=row.text,
            idempotency_key=f"proactive:{item.source}:{item.id}",
            kind=OutboundKind.PROACTIVE,
        )
        async with self.executor.chat_lock(item.chat.key):
            await self.executor.settle(item, row.outbox_id, out, "sent (after an interrupted run)")
        return 1
