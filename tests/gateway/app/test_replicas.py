"""Several replicas on one real PostgreSQL, each an `App` in this event loop: only the leader
polls Telegram while the other stands by (healthy, sending), the standby takes over when the
leader stops, `/metrics` names the replica and its leaderships, and usage figures add up the
counters of the replicas that beat in the last minute."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg

from channels.telegram import TelegramChannel
from gateway.admin.stats import render
from gateway.app.app import App
from gateway.app.config import Config
from gateway.app.replicas import role_of
from gateway.core.clock import ManualClock
from gateway.core.messages import ChatRef, Outbound
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel
from tests.fakes.bot_api_server import BotAPIServer
from tests.fakes.clock import run_clock_until, until
from tests.prom import parse, value
from vault.replicas import Beat

TOKEN = "123456:replica-test"
ROLE = "telegram-polling"


def replica_config(tmp_path: Path, pg_url: str, name: str) -> Config:
    return make_config(
        tmp_path,
        vault={"path": str(tmp_path / f"{name}.db"), "url": pg_url, "replica_id": name},
        proactive={"enabled": False},
    )


async def tried_to_lead(pg_url: str, replica: str) -> bool:
    """Whether `replica`'s standby connection has asked for the lock and is idle again."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND state = 'idle' AND query LIKE %s",
            (f"iris {replica} leader {ROLE}", "%pg_try_advisory_lock%"),
        )
        row = await cursor.fetchone()
    return row is not None and row[0] == 1


async def leads(app: App) -> float:
    _, samples = parse(await app.metrics.render())
    assert value(samples, "iris_replica_info", replica=app.replica.id) == 1
    return value(samples, "iris_leadership", role=ROLE)


async def test_only_the_leader_polls_and_the_standby_takes_over(
    tmp_path: Path, pg_url: str
) -> None:
    clock = ManualClock()
    async with BotAPIServer() as api:
        first = TelegramChannel(token=TOKEN, base_url=api.base_url, poll_timeout_s=1)
        second = TelegramChannel(token=TOKEN, base_url=api.base_url, poll_timeout_s=1)
        config_a, config_b = (replica_config(tmp_path, pg_url, n) for n in ("a", "b"))
        async with (
            app_with(config_a, first, FakeLLM(), clock) as a,
            app_with(config_b, second, FakeLLM(), clock) as b,
        ):
            stop_a, stop_b = asyncio.Event(), asyncio.Event()
            serving_a = asyncio.create_task(a.serve(stop_a))
            await asyncio.wait_for(first.started.wait(), 10)
            serving_b = asyncio.create_task(b.serve(stop_b))
            async with asyncio.timeout(10):
                while not await tried_to_lead(pg_url, "b"):  # noqa: ASYNC110  (a query)
                    await asyncio.sleep(0)
            assert (a.replica.leaderships, b.replica.leaderships) == ({ROLE}, set())
            assert (await leads(a), await leads(b)) == (1, 0)
            [standby] = [h for h in b.channel_health() if h.channel == "telegram"]
            assert standby.connected and standby.detail.startswith("standby")
            assert not second.started.is_set()  # never polled
            # ... and still sends (what its turns and its background resend deliver).
            out = Outbound(chat=ChatRef(channel="telegram", chat_id="7"), text="from b",
                           idempotency_key="b-1")  # fmt: skip
            await second.send(out)
            assert [m.text for m in api.sent] == ["from b"]

            stop_a.set()  # the leader stops: its session, and so its lock, ends
            await asyncio.wait_for(serving_a, 10)
            polls = api.polls
            await run_clock_until(clock, second.started.is_set)  # the next retry takes over
            assert b.replica.leaderships == {ROLE}
            assert await leads(b) == 1
            await api.wait(lambda: api.polls > polls)  # and it polls
            stop_b.set()
            await asyncio.wait_for(serving_b, 10)


async def test_stats_add_up_the_replicas_seen_in_the_last_minute(
    tmp_path: Path, pg_url: str
) -> None:
    clock = ManualClock()
    config_a, config_b = (replica_config(tmp_path, pg_url, n) for n in ("a", "b"))
    async with (
        app_with(config_a, MemoryChannel(), FakeLLM(), clock) as a,
        app_with(config_b, MemoryChannel(), FakeLLM(), clock) as b,
    ):
        a.metrics.inbound.inc("telegram", amount=2)
        b.metrics.inbound.inc("telegram", amount=3)
        b.metrics.inbound.inc("slack")
        assert b.fleet.jobs() == [b.fleet.heartbeat]  # PostgreSQL: the heartbeat runs
        async with asyncio.TaskGroup() as tg:
            beating = tg.create_task(b.fleet.heartbeat())
            await until(lambda: clock.sleepers == 1)  # b's first beat is written
            beating.cancel()
        assert b.fleet.store is not None
        gone = Beat(
            "gone",
            0,
            clock.now_ms() - 61_000,
            (),
            {"iris_inbound_messages_total": {"telegram": 100}},
        )
        await b.fleet.store.beat(gone)  # last seen over a minute ago: not counted

        a.metrics.inbound.inc("telegram")  # a's own figures are live, not its last beat
        figures = await a.stats.collect(clock.now_ms())
    seen = figures["replicas"]
    assert [r["id"] for r in seen["replicas"]] == ["a", "b"]
    assert seen["counters"]["iris_inbound_messages_total"] == {"telegram": 6, "slack": 1}
    text = render(figures)
    assert "a: leads nothing" in text and "b: leads nothing" in text
    assert "inbound_messages_total: slack 1, telegram 6" in text
    assert "gone" not in text


def test_only_exclusive_receiving_needs_a_leader(tmp_path: Path) -> None:
    polling = make_config(tmp_path, telegram={"mode": "polling"}, slack={"mode": "socket"})
    assert role_of(polling, "telegram") == "telegram-polling"
    assert role_of(polling, "slack") == "slack-socket-mode"
    assert role_of(polling, "memory") is None
    # Webhooks and HTTP events arrive at whichever replica the load balancer picks.
    hooks = make_config(tmp_path, telegram={"mode": "webhook"}, slack={"mode": "http"})
    assert role_of(hooks, "telegram") is None
    assert role_of(hooks, "slack") is None
