"""The pulse engine: a fast loop executing due items and a slow loop scanning for patterns.

Fast loop (every `poll_interval_s`, or sooner when woken by a new intent): reconcile rows left
`delivering` by an earlier run, expire items that missed their time by more than the maximum
age, claim at most `max_per_tick` due items with a lease, and execute them in queues: the
items of one user, and of every chat they share, form one queue run in priority order —
user-requested reminders first, then the model's follow-ups by confidence, then the scan's
check-ins — so when several of a user's items are due at once (the release after quiet hours)
the most important goes out and the spacing holds back the rest. Up to `concurrency` queues
run at a time (quotas and spacing stay exact: they are re-checked in the transaction that
writes the outbox row); a tick whose items could use up the global quota runs its queues one
by one, so which item gets the last slot never depends on timing. Items that came due while
Iris was down run once (recorded as late), never more than `max_per_tick` at a time.

Slow loop: the passive scan on the `scan_cron` schedule in `scan_timezone` (croniter from a
zone-aware time). Each wall-clock time of the schedule fires once: the hour repeated when
clocks go back does not run a scan again, and a time skipped when they go forward runs at the
first instant after the gap. With `periodic` (replicas sharing the vault), each scheduled time
is claimed in the vault first (`vault/periodic.py`): every replica runs the loop, one scans.

Leases are short (`[proactive] lease_s`, 60 s) and renewed every third of their length for as
long as a tick holds the item, so a slow send never loses its item to another run, and the items
of a run that died are free again one lease later, not minutes later.

Cancellation is a crash as far as the data is concerned: whatever step an item was in, the
lease expires and the next run either re-executes it (nothing was written yet), finishes it
from the outbox row's outcome, or marks it `uncertain` (the send may have happened). Nothing
is sent twice. `run()` is cancellable and holds no flags; time comes from the `Clock` port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter

from gateway.core.messages import Outbound, OutboundKind
from gateway.core.ports import Clock
from proactive.execute import Executor, Judged
from proactive.outcome import Outcome
from proactive.policy import DAY_MS, HOUR_MS, utc_day_start_ms
from proactive.settings import ProactiveSection
from proactive.tick import TickCache
from vault.db import Vault
from vault.periodic import PeriodicRuns
from vault.proactive.scan import ScanResult, scan
from vault.proactive.store import Delivering, Item, ItemStatus, ProactiveStore

log = logging.getLogger(__name__)

# How far back the claim reads the claimed users' sends: a local day starts less than 26 h
# before now, and the spacing is at most a day (`[proactive] min_spacing_minutes`).
LOOKBACK_MS = 2 * DAY_MS
SCAN_JOB = "proactive scan"  # its name in `periodic_runs`


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    poll_interval_s: float = 60.0
    scan_cron: str = "0 */6 * * *"
    scan_timezone: str = "UTC"
    max_per_tick: int = 20
    lease_ms: int = 60_000
    max_age_ms: int = 7 * DAY_MS
    dormancy_ms: int = 7 * DAY_MS
    dormancy_enabled: bool = True
    unanswered_ms: int = 24 * HOUR_MS
    drop_ratio: float = 0.3
    # Chats whose items run at the same time (one chat's items always run in order).
    concurrency: int = 8

    @classmethod
    def from_section(cls, s: ProactiveSection) -> EngineConfig:
        return cls(
            poll_interval_s=s.poll_interval_s,
            scan_cron=s.scan_cron,
            scan_timezone=s.scan_timezone,
            max_per_tick=s.max_per_tick,
            lease_ms=int(s.lease_s * 1000),
            max_age_ms=int(s.max_age_days * DAY_MS),
            dormancy_ms=int(s.dormancy_days * DAY_MS),
            dormancy_enabled=s.dormancy.enabled,
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
    # An idle tick's read of the next due time (None: nothing pending, or the tick ran items).
    next_due_ms: int | None = None


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
        periodic: PeriodicRuns | None = None,
    ) -> None:
        self.vault = vault
        self.store = store
        self.executor = executor
        self.clock = clock
        self.config = config
        self.name = name
        self.periodic = periodic
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
        zone = ZoneInfo(self.config.scan_timezone)
        last: datetime | None = None
        while True:
            at, last = next_scan(self.config.scan_cron, zone, self.clock.now_ms(), last)
            await self.clock.sleep_until(at)
            try:
                if self.periodic is not None and not await self.periodic.claim(
                    SCAN_JOB, at, self.clock.now_ms()
                ):
                    log.debug("proactive scan of %d: another replica runs it", at)
                    continue
                found = await self.scan()
                log.info("proactive scan: %d new trigger(s)", found.total)
            except Exception:
                log.exception("proactive scan failed; retrying at the next scheduled time")

    async def scan(self) -> ScanResult:
        return await scan(
            self.vault,
            now_ms=self.clock.now_ms(),
            dormancy_ms=self.config.dormancy_ms if self.config.dormancy_enabled else None,
            unanswered_ms=self.config.unanswered_ms,
            max_age_ms=self.config.max_age_ms,
            drop_ratio=self.config.drop_ratio,
        )

    async def tick(self) -> TickReport:
        self._ticks += 1
        token = f"{self.name}:{self._run_id}:{self._ticks}"
        # Both reads share a hop; reconciling touches only `delivering` rows, not what is due.
        rows, next_due = await asyncio.gather(self.store.delivering(), self.store.next_due_ms())
        if not rows and (next_due is None or next_due > self.clock.now_ms()):
            return TickReport(0, 0, 0, {}, next_due)  # the common idle tick: reads only
        held: list[Item] = []
        async with self._renewing(held, token):
            return await self._work(rows, next_due, token, held)

    @contextlib.asynccontextmanager
    async def _renewing(self, held: list[Item], token: str) -> AsyncIterator[None]:
        """While the tick runs, renew the lease of what it holds every third of the lease: a
        live run never loses an item however long a send takes, and a dead one's items are
        free once one short lease has passed."""

        async def renew() -> None:
            while True:
                await self.clock.sleep(self.config.lease_ms / 3000)
                try:
                    await self.store.renew(held, token, self.clock.now_ms() + self.config.lease_ms)
                except Exception:  # the next renewal may succeed; the lease still has 2/3 left
                    log.exception("renewing the proactive leases of %s failed", token)

        renewer = asyncio.create_task(renew(), name=f"{self.name} lease renewal")
        try:
            yield
        finally:
            renewer.cancel()
            await asyncio.wait({renewer})

    async def _work(
        self, rows: list[Delivering], next_due: int | None, token: str, held: list[Item]
    ) -> TickReport:
        reconciled = await self._reconcile(rows, token, held)
        now = self.clock.now_ms()
        if next_due is None or next_due > now:
            return TickReport(0, 0, reconciled, {}, next_due)
        claimed = await self.store.expire_and_claim(
            now_ms=now, cutoff_ms=now - self.config.max_age_ms, lease_ms=self.config.lease_ms,
            limit=self.config.max_per_tick, token=token, sends_since_ms=now - LOOKBACK_MS,
            global_since_ms=utc_day_start_ms(now),
        )  # fmt: skip
        expired, items = claimed.expired, claimed.items
        held.extend(items)
        outcomes: Counter[Outcome] = Counter()
        tick = self.executor.new_tick()
        tick.seed(
            since_ms=now - LOOKBACK_MS,
            sends=claimed.sends,
            global_since_ms=utc_day_start_ms(now),
            global_sends=claimed.global_sends,
        )
        await self.executor.prefetch(tick, items)  # only what the claim's read did not cover
        queue = deque(queues(items))
        width = self.config.concurrency
        if await self.executor.global_contended(tick, items, now):
            width = 1

        async def worker() -> None:
            while queue:
                await self._run_queue(queue.popleft(), tick, outcomes)

        async with asyncio.TaskGroup() as tg:
            for _ in range(min(max(1, width), len(queue))):
                tg.create_task(worker())
        return TickReport(len(items), expired, reconciled, dict(outcomes))

    async def _run_queue(
        self, items: list[Item], tick: TickCache, outcomes: Counter[Outcome]
    ) -> None:
        """One queue's items in order. An item that may send is finished before the next is
        judged (its send changes the user's counts); those that only reschedule or end are
        written together at the end, so a user's backlog costs one vault hop, not one per
        item."""

        async def act(judged: Judged) -> None:
            outcomes[await self._guarded(judged.item, self.executor.act(judged, tick))] += 1

        writes: list[Coroutine[Any, Any, None]] = []  # `_guarded`: an error fails the item
        try:
            for item in items:
                try:
                    judged = await self.executor.judge(item, tick)
                except Exception:
                    outcomes[await self._failed(item)] += 1
                    continue
                if judged.sends:
                    await act(judged)
                else:
                    writes.append(act(judged))
        except BaseException:  # stopped: the writes not begun never will be
            for write in writes:
                write.close()
            raise
        if writes:
            await asyncio.gather(*writes)

    async def _guarded(self, item: Item, run: Awaitable[Outcome]) -> Outcome:
        try:
            return await run
        except Exception:
            return await self._failed(item)

    async def _failed(self, item: Item) -> Outcome:
        log.exception("%s: execution failed", item.key)
        failed = await self.store.finish(
            item, ItemStatus.FAILED, "internal error during execution", self.clock.now_ms()
        )
        return Outcome.FAILED if failed else Outcome.LOST

    async def reconcile(self, token: str) -> int:
        """Finish `delivering` rows: from their outbox outcome, or after their lease expired."""
        held: list[Item] = []
        async with self._renewing(held, token):
            return await self._reconcile(await self.store.delivering(), token, held)

    async def _reconcile(self, rows: list[Delivering], token: str, held: list[Item]) -> int:
        done = 0
        for row in rows:
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
                done += await self._take_over(row, token, now, held)
        return done

    async def _take_over(self, row: Delivering, token: str, now: int, held: list[Item]) -> int:
        item = await self.store.take_over(row.item, token, now + self.config.lease_ms, now)
        if item is None:
            return 0
        held.append(item)
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


def priority(item: Item) -> tuple[int, float, int, str, int]:
    """Run order among one user's items due at once: reminders the user asked for, then the
    model's follow-ups by confidence, then the passive scan's check-ins; then by due time."""
    rank = 0 if item.is_reminder else 1 if item.source == "intent" else 2
    return (rank, -item.confidence, item.execute_at, item.source, item.id)


def queues(items: Iterable[Item]) -> list[list[Item]]:
    """Items in queues that may run side by side: one per group of users linked by the chats
    they share (a user's items across their chats; a group chat's items), each in `priority`
    order, the queues in the order of their first item."""
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def root(key: tuple[str, int]) -> tuple[str, int]:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    ordered = list(items)
    for item in ordered:
        parent[root(("chat", item.chat_pk))] = root(("user", item.user_pk))
    groups: dict[tuple[str, int], list[Item]] = {}
    for item in ordered:
        groups.setdefault(root(("user", item.user_pk)), []).append(item)
    return [sorted(group, key=priority) for group in groups.values()]


def next_scan(
    cron: str, zone: ZoneInfo, now_ms: int, last: datetime | None
) -> tuple[int, datetime]:
    """The next scan after `now_ms` (UTC ms) and its local wall time, `cron` read in `zone`.

    `last` is the wall time (naive) of the previous scan: a time at or before it is skipped, so
    the hour repeated when clocks go back runs nothing twice. A time that does not exist (the
    gap when clocks go forward) is croniter's first instant after the gap.
    """
    it = croniter(cron, datetime.fromtimestamp(now_ms / 1000, zone))
    while True:
        at: datetime = it.get_next(datetime)
        wall = at.replace(tzinfo=None)
        if last is None or wall > last:
            return int(at.timestamp() * 1000), wall
