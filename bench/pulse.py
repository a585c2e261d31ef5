"""Proactive engine benchmarks: idle tick cost, execution throughput, passive scan.

    python bench/pulse.py [--pending 1000000] [--due 10000] [--users 100000]

1. Tick cost with N pending intents that are not due (target: median <= 5 ms).
2. Executions per second with M due items, a zero-latency gate and channel (target >= 2,000/s),
   once per `--concurrency` value (chats executed at a time; the engine's default is 8). The
   gate runs the real tool loop with the proactive tools offered, and decides at once.
3. One passive scan over U users with a realistic mix of histories (target <= 2 s).

Fixtures are bulk-loaded over a plain `sqlite3` connection by `vault/bulk.py` (setup is not
what is measured); everything measured runs through the real vault, stores, policy, executor
and engine.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import peak_rss_mib, reference_ms
from gateway.agent.memory_tools import memory_tools
from gateway.agent.tools import ToolRegistry
from gateway.core.clock import ManualClock
from gateway.core.llm import LLMRequest, LLMResponse, ToolCall
from gateway.core.messages import ChatRef, Outbound, SentReceipt
from gateway.turns.delivery import Delivery
from proactive.engine import Engine, EngineConfig
from proactive.execute import Executor
from proactive.outcome import Outcome
from proactive.policy import DAY_MS, HOUR_MS, PolicyConfig
from proactive.tools import ProactiveTools
from vault.bulk import SeedIntent, SeedMessage, SeedUser, add_intents, add_messages, add_users
from vault.db import Vault
from vault.memories import Memories
from vault.migrations import migrate
from vault.outbox import Outbox
from vault.proactive.log import ProactiveLog
from vault.proactive.store import ProactiveStore

NOW = 1_780_000_000_000
SEND = LLMResponse(
    parts=(ToolCall("b", "proactive_decision", {"action": "send", "message": "hi"}),),
    stop_reason="tool_use",
    model="bench",
)


class NullChannel:
    name = "bench"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def send(self, out: Outbound) -> SentReceipt:
        return SentReceipt(platform_message_ids=("1",))

    async def typing(self, chat: ChatRef) -> None:
        return None

    async def run(self, on_inbound: object) -> None:
        return None

    def command_hint(self, command: str) -> str:
        return f"/{command}"


async def gate(request: LLMRequest, chat_key: str | None) -> LLMResponse:
    return SEND


class NoLock:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def seed_users(db: sqlite3.Connection, n: int) -> None:
    add_users(
        db,
        (
            SeedUser(i, "bench", f"u{i}", f"c{i}", NOW - 60 * DAY_MS, NOW - (i % 20) * DAY_MS)
            for i in range(1, n + 1)
        ),
    )


async def open_engine(
    path: Path, policy: PolicyConfig, per_tick: int, concurrency: int = 8
) -> tuple[Vault, Engine]:
    vault = Vault(path)
    await vault.open()
    clock = ManualClock(NOW)
    store = ProactiveStore(vault, served=("bench",))  # as the app: the channels it runs
    plog, memories = ProactiveLog(vault), Memories(vault)
    delivery = Delivery(outbox=Outbox(vault), channels={"bench": NullChannel()}, clock=clock)
    tools = ToolRegistry()  # what the app offers the gate: the memory and proactive tools
    tools.register(*memory_tools(memories))
    tools.register(*ProactiveTools(store=store, plog=plog, policy=policy,
                                   default_confidence=0.8).tools())  # fmt: skip
    executor = Executor(
        store=store, plog=plog, memories=memories, call_model=gate,
        deliver=delivery.deliver_pending, chat_lock=lambda key: NoLock(), clock=clock,
        policy=policy, rng=random.Random(1), tools=tools.proactive(),
    )  # fmt: skip
    config = EngineConfig(max_per_tick=per_tick, lease_ms=3_600_000, concurrency=concurrency)
    return vault, Engine(vault=vault, store=store, executor=executor, clock=clock, config=config)


async def migrated(path: Path) -> None:
    async with Vault(path) as vault:
        await migrate(vault)


def ms(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"median {statistics.median(values):.2f} ms, p99 {p99:.2f} ms"


async def bench_idle_tick(tmp: Path, pending: int) -> None:
    path = tmp / "idle.db"
    await migrated(path)
    with sqlite3.connect(path) as db:
        seed_users(db, 1000)
        add_intents(db, (SeedIntent((i % 1000) + 1, (i % 1000) + 1, "later", NOW + HOUR_MS + i,
                                    NOW) for i in range(pending)))  # fmt: skip
    vault, engine = await open_engine(path, PolicyConfig(), 20)
    try:
        times = []
        for _ in range(500):
            started = time.perf_counter()
            report = await engine.tick()
            times.append((time.perf_counter() - started) * 1000)
            assert report.claimed == 0
    finally:
        await vault.close()
    print(f"idle tick, {pending:,} pending not-due intents: {ms(times)}, "
          f"{1000 / statistics.median(times):,.0f} ticks/s")  # fmt: skip


async def bench_executions(tmp: Path, due: int, concurrency: int) -> None:
    path = tmp / f"due-{concurrency}.db"
    await migrated(path)
    users = max(1, due // 5)
    with sqlite3.connect(path) as db:
        seed_users(db, users)
        add_intents(db, (SeedIntent((i % users) + 1, (i % users) + 1, "check in", NOW - 1000,
                                    NOW - DAY_MS) for i in range(due)))  # fmt: skip
    # No quota, quiet hours or spacing: every due item runs the whole path and is sent.
    unlimited = PolicyConfig(per_user_daily=10**9, global_daily=10**9, quiet_start=0, quiet_end=0,
                             min_spacing_ms=0)  # fmt: skip
    vault, engine = await open_engine(path, unlimited, due, concurrency)
    try:
        started = time.perf_counter()
        report = await engine.tick()
        elapsed = time.perf_counter() - started
    finally:
        await vault.close()
    assert report.outcomes == {Outcome.SENT: due}, report.outcomes
    print(f"executions, {due:,} due items, {concurrency} chats at a time (policy, gate, "
          f"outbox, send, record): {due / elapsed:,.0f}/s "
          f"({elapsed * 1000 / due:.3f} ms each)")  # fmt: skip


async def bench_scan(tmp: Path, users: int) -> None:
    path = tmp / "scan.db"
    await migrated(path)
    with sqlite3.connect(path) as db:
        seed_users(db, users)
        rows: list[SeedMessage] = []
        for i in range(1, users + 1):
            last = NOW - (i % 20) * DAY_MS
            for week in range(5):  # some history, busier in the past for a share of users
                for n in range(1 if i % 7 else 3):
                    at = last - week * 7 * DAY_MS - n * HOUR_MS
                    rows.append(SeedMessage(i, i, i, "user", "hi", at))
            if i % 20 == 5:  # the last word was a question, four days ago
                rows.append(SeedMessage(i, i, None, "assistant", "Did that work?", last + HOUR_MS))
        add_messages(db, rows)
    vault, engine = await open_engine(path, PolicyConfig(), 20)
    try:
        times, found = [], []
        for _ in range(3):
            started = time.perf_counter()
            found.append(await engine.scan())
            times.append((time.perf_counter() - started) * 1000)
    finally:
        await vault.close()
    first = found[0]
    print(f"passive scan, {users:,} users / {len(rows):,} messages: first {times[0]:.0f} ms "
          f"({first.dormant_user:,} dormant, {first.unanswered:,} unanswered, "
          f"{first.engagement_drop:,} drops), repeat {ms(times[1:])}")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[8, 32],
        help="chats executed at a time (EngineConfig.concurrency; the engine's default is 8)",
    )  # fmt: skip
    args = parser.parse_args()
    print(f"machine speed: reference loop {reference_ms():.0f} ms")
    with tempfile.TemporaryDirectory(prefix="iris-bench-") as tmp:
        await bench_idle_tick(Path(tmp), args.pending)
        for concurrency in args.concurrency:
            await bench_executions(Path(tmp), args.due, concurrency)
        await bench_scan(Path(tmp), args.users)
    print(f"peak memory (max RSS): {peak_rss_mib():.0f} MiB")
    print(f"machine speed after: reference loop {reference_ms():.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
