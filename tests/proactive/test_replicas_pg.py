"""Proactive engines of several replicas on one PostgreSQL vault: claims racing each other never
hold one item twice (`FOR UPDATE SKIP LOCKED`), every item runs once, and a crashed replica's
items are taken over one lease later — re-run if nothing was written, sent if its outbox row
waits, `uncertain` (never resent) if the send may have happened."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from gateway.core.clock import ManualClock
from gateway.core.llm import LLMRequest, LLMResponse
from proactive.engine import EngineConfig
from proactive.policy import PolicyConfig
from tests.fakes import FakeLLM, MemoryChannel
from tests.proactive.support import MIN, BlockingChannel, Harness, utc_ms
from vault.db import Vault
from vault.migrations import migrate
from vault.periodic import PeriodicRuns
from vault.pg.vault import PgVault
from vault.proactive.scan import ScanResult


@asynccontextmanager
async def replicas(
    url: str, count: int, channel: MemoryChannel, **engine: object
) -> AsyncIterator[list[Harness]]:
    """`count` harnesses, each on its own connections to one database, sharing the clock and
    the platform (`channel`)."""
    clock = ManualClock(utc_ms("2026-01-10T12:00:00"))
    config = EngineConfig(**{"lease_ms": 5 * MIN, **engine})  # type: ignore[arg-type]
    async with AsyncExitStack() as stack:
        found = []
        for _ in range(count):
            vault = await stack.enter_async_context(PgVault(url))
            await migrate(vault)
            policy = PolicyConfig(jitter_max_ms=0, min_spacing_ms=0)
            h = Harness(vault=vault, clock=clock, llm=FakeLLM(), channel=channel, policy=policy,
                        config=config)  # fmt: skip
            found.append(h)
        yield found


async def test_engines_racing_on_one_database_run_each_item_once(pg_url: str) -> None:
    channel = MemoryChannel()
    async with replicas(pg_url, 3, channel, max_per_tick=4, concurrency=4) as hs:
        ids = []
        for n in range(36):
            user, chat = await hs[0].user(f"u{n}")
            ids.append(await hs[0].intent(user, chat))

        async def gate(request: LLMRequest, chat_key: str | None) -> LLMResponse:
            await asyncio.sleep(0)  # let the other engines' claims interleave
            hs[0].send_decision(f"hello {chat_key}")
            return await hs[0].llm.complete(request)

        engines = []
        for n, h in enumerate(hs):
            h.call_model = gate  # type: ignore[method-assign]
            engines.append(h.engine(f"replica{n}"))
        claimed = [0] * len(engines)
        while await hs[0].vault.scalar(
            "SELECT count(*) FROM proactive_intents WHERE status = 'pending'"
        ):
            reports = await asyncio.gather(*(e.tick() for e in engines))
            for n, report in enumerate(reports):
                claimed[n] += report.claimed
        assert sum(claimed) == len(ids)
        keys = [o.idempotency_key for o in channel.sent]
        assert sorted(keys) == sorted(f"proactive:intent:{i}" for i in ids)
        rows = await hs[0].vault.fetchall("SELECT status, attempts FROM proactive_intents")
        assert {(r[0], r[1]) for r in rows} == {("sent", 1)}  # each claimed exactly once


async def test_a_crashed_replicas_items_are_taken_over_after_the_lease(pg_url: str) -> None:
    channel = BlockingChannel()
    async with replicas(pg_url, 1, channel, concurrency=2) as [survivor]:
        async with replicas(pg_url, 1, channel, concurrency=2) as [doomed]:
            doomed.clock = survivor.clock
            doomed.auto_send = survivor.auto_send = "hello"
            ids = []
            for n in range(4):
                user, chat = await survivor.user(f"u{n}")
                ids.append(await survivor.intent(user, chat))
            tick = asyncio.create_task(doomed.engine("doomed").tick())
            await channel.entered.wait()  # a send is under way: the replica dies now
            tick.cancel()
            await asyncio.wait([tick])
        # Its leases still run: the survivor claims nothing yet (it may finish the items whose
        # outbox row already settled: that is reading an outcome, not taking over).
        early = await survivor.engine("early").tick()
        assert early.claimed == 0 and channel.sent == []
        in_flight = {
            r[0]
            for r in await survivor.vault.fetchall(
                "SELECT idempotency_key FROM outbox WHERE status IN ('sending', 'uncertain')"
            )
        }
        assert in_flight
        channel.release.set()
        survivor.clock.advance(survivor.config.lease_ms / 1000 + 1)
        engine = survivor.engine("survivor")
        await engine.tick()
        await engine.tick()
        statuses = {i: await survivor.status(i) for i in ids}
        uncertain = {f"proactive:intent:{i}" for i, s in statuses.items() if s == "uncertain"}
        assert uncertain == in_flight  # exactly the sends that may have gone out
        assert set(statuses.values()) <= {"sent", "uncertain"}
        keys = [o.idempotency_key for o in channel.sent]
        assert len(keys) == len(set(keys))  # nothing went out twice
        assert set(keys) == {f"proactive:intent:{i}" for i, s in statuses.items() if s == "sent"}


class Attempts(PeriodicRuns):
    """The real slot claim; every attempt is put on `seen` as (replica, slot, won)."""

    def __init__(self, vault: Vault, replica: str, seen: asyncio.Queue[tuple[str, int, bool]]):
        super().__init__(vault, replica)
        self.seen = seen

    async def claim(self, name: str, slot_ms: int, now_ms: int) -> bool:
        won = await super().claim(name, slot_ms, now_ms)
        self.seen.put_nowait((self.replica, slot_ms, won))
        return won


async def test_every_replica_runs_the_scan_loop_and_one_scans_each_slot(pg_url: str) -> None:
    seen: asyncio.Queue[tuple[str, int, bool]] = asyncio.Queue()
    scanned: list[tuple[str, int]] = []
    async with replicas(pg_url, 3, MemoryChannel(), scan_cron="0 * * * *",
                        poll_interval_s=365 * 86_400) as hs:  # fmt: skip
        engines = []
        for n, h in enumerate(hs):
            engine = h.engine(f"r{n}")
            engine.periodic = Attempts(h.vault, f"r{n}", seen)

            async def scan(name: str = f"r{n}", h: Harness = h) -> ScanResult:
                scanned.append((name, h.clock.now_ms()))
                return ScanResult(0, 0, 0)

            engine.scan = scan  # type: ignore[method-assign]
            engines.append(engine)
        clock = hs[0].clock
        async with asyncio.TaskGroup() as tg:
            running = [tg.create_task(e.run()) for e in engines]
            slots = [clock.now_ms() + n * 60 * MIN for n in (1, 2, 3)]
            for slot in slots:
                # Every loop waits for its next time (sleepers on a manual clock: no event).
                while clock.sleepers < 2 * len(engines):  # noqa: ASYNC110
                    await asyncio.sleep(0)
                clock.set(slot)
                attempts = [await seen.get() for _ in engines]
                assert {a[1] for a in attempts} == {slot}
                assert sorted(a[2] for a in attempts) == [False, False, True]
            for task in running:
                task.cancel()
        assert [at for _, at in scanned] == slots  # each slot scanned once, by its winner
        rows = await hs[0].vault.fetchall("SELECT slot, replica FROM periodic_runs ORDER BY slot")
        assert [(r[0], r[1]) for r in rows] == [(at, name) for name, at in scanned]
