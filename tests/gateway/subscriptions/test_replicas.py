"""Subscriptions across two replicas on one real PostgreSQL, each a whole app serving its admin
API: an event stored on one replica reaches a stream open on the other through the wake-up hint
(no keep-alive or poll needed), a subscription made on one is heard by the other's triggers, a
stream still gets the other replica's events when its hints are down (the poll), and
`/healthz` and `/metrics` show a hint listener that is down as degraded, not down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg

from gateway.core.messages import Inbound
from gateway.subscriptions.hints import EventHints
from tests.fakes import inbound
from tests.fakes.clock import run_clock_until, until
from tests.gateway.subscriptions.helpers import AUTH, Served, read_sse, served
from tests.gateway.subscriptions.test_api import ASK, poll_body, user_with_memory
from tests.prom import parse, value
from vault.pg.notify import Notifications
from vault.subscriptions import EVENT_HINTS

QUIET: dict[str, object] = {"stream_keepalive_s": 300.0}  # no keep-alive rescan within a test


@asynccontextmanager
async def replicas(tmp_path: Path, pg_url: str) -> AsyncIterator[tuple[Served, Served]]:
    def vault(name: str) -> dict[str, object]:
        return {"path": str(tmp_path / f"{name}.db"), "url": pg_url, "replica_id": name}

    async with (
        served(tmp_path, vault=vault("a"), subscriptions=QUIET) as a,
        served(tmp_path, vault=vault("b"), subscriptions=QUIET) as b,
    ):
        yield a, b


@asynccontextmanager
async def hearing(*apps: Served) -> AsyncIterator[None]:
    """Each app's hints job (what `serve()` runs in the background), listening."""
    async with asyncio.TaskGroup() as tg:
        jobs = []
        for s in apps:
            assert s.feature.hints is not None  # PostgreSQL: the job exists
            jobs.append(tg.create_task(s.feature.hints.run()))
            await asyncio.wait_for(s.app.replica.hints[EVENT_HINTS].wait(), 10)
        yield
        for job in jobs:
            job.cancel()


def a_message(text: str) -> Inbound:
    return inbound(text, user="u1", chat="u1")


def sse_body(**extra: Any) -> dict[str, Any]:
    return {**poll_body(), "callback": "sse", **extra}


async def test_an_event_stored_on_one_replica_wakes_a_stream_on_the_other(
    tmp_path: Path, pg_url: str
) -> None:
    async with replicas(tmp_path, pg_url) as (a, b), hearing(a, b):
        _, made = await a.call("POST", "/context/subscriptions", sse_body())
        await user_with_memory(a)
        url = f"{b.base}/context/stream?subscription={made['id']}"
        async with b.http.get(url, headers=AUTH) as res:
            assert res.status == 200
            await until(lambda: b.feature.streams.listeners(made["id"]) == 1)
            await a.app.router.submit(a_message(ASK))  # the trigger fires on replica a
            [(first_id, first)] = await asyncio.wait_for(read_sse(res, 1), 10)
        assert first["subscription"] == made["id"]
        assert first["suggestion"]["trigger"]["type"] == "message"
        # Resumable on either replica: the rows are shared.
        await a.app.router.submit(a_message(ASK + " now"))
        headers = {**AUTH, "Last-Event-ID": first_id}
        async with b.http.get(url, headers=headers) as res:
            [(second_id, _)] = await asyncio.wait_for(read_sse(res, 1), 10)
        assert int(second_id) > int(first_id)


async def test_a_subscription_made_on_one_replica_is_heard_by_the_others_triggers(
    tmp_path: Path, pg_url: str
) -> None:
    async with replicas(tmp_path, pg_url) as (a, b), hearing(a, b):
        await user_with_memory(a)  # a's triggers looked: no subscription yet (cached)
        assert a.feature.engine._live == []
        _, made = await b.call("POST", "/context/subscriptions", sse_body())
        await until(lambda: a.feature.engine._live is None)  # the hint dropped a's cache
        url = f"{b.base}/context/stream?subscription={made['id']}"
        async with b.http.get(url, headers=AUTH) as res:
            await until(lambda: b.feature.streams.listeners(made["id"]) == 1)
            await a.app.router.submit(a_message(ASK))
            [(_, event)] = await asyncio.wait_for(read_sse(res, 1), 10)
        assert event["subscription"] == made["id"]
        # Disabled on b: a's triggers stop at once, not when a reloads for another reason.
        await b.call("POST", f"/context/subscriptions/{made['id']}/disable")
        await until(lambda: a.feature.engine._live is None)
        await a.app.router.submit(a_message(ASK + " again"))
        _, page = await b.call("GET", f"/context/suggestions?subscription={made['id']}")
        assert len(page["events"]) == 1


async def test_without_hints_a_stream_polls_for_the_other_replicas_events(
    tmp_path: Path, pg_url: str
) -> None:
    async with replicas(tmp_path, pg_url) as (a, b):
        # b's listener cannot connect (nothing listens on port 1): b polls on its clock.
        down = Notifications("postgresql://127.0.0.1:1/iris", EVENT_HINTS, sleep=b.clock.sleep)
        polling = EventHints(down, streams=b.feature.streams, changed=b.feature.engine.invalidate,
                             clock=b.clock, poll_s=1.0)  # fmt: skip
        _, made = await a.call("POST", "/context/subscriptions", sse_body())
        await user_with_memory(a)
        url = f"{b.base}/context/stream?subscription={made['id']}"
        async with asyncio.TaskGroup() as tg, b.http.get(url, headers=AUTH) as res:
            job = tg.create_task(polling.run())
            await until(lambda: b.feature.streams.listeners(made["id"]) == 1)
            await a.app.router.submit(a_message(ASK))  # no hint reaches b
            reading = tg.create_task(read_sse(res, 1))
            await run_clock_until(b.clock, reading.done)  # b's poll (every 1 s) finds it
            [(_, event)] = reading.result()
            assert not down.listening.is_set()  # never woken by a hint
            job.cancel()
        assert event["subscription"] == made["id"]


async def test_health_shows_a_hint_listener_that_is_down_as_degraded(
    tmp_path: Path, pg_url: str
) -> None:
    async with replicas(tmp_path, pg_url) as (a, b), hearing(b):
        ok, report = await healthz(b)
        assert ok and report["hints"][EVENT_HINTS] is True
        assert not any(EVENT_HINTS in line for line in report["degraded"])
        assert await listening(b, EVENT_HINTS) == 1
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                b"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                b"WHERE query = %s AND pid <> pg_backend_pid()",
                (f'LISTEN "{EVENT_HINTS}"',),
            )
        await until(lambda: not b.app.replica.hints[EVENT_HINTS].is_set())
        ok, report = await healthz(b)
        assert ok  # degraded, not down: it polls instead (at most 1 s late)
        assert report["hints"][EVENT_HINTS] is False
        slower = f"{EVENT_HINTS}: no wake-up hints, polling until LISTEN reconnects"
        assert slower in report["degraded"]
        assert report["problems"] == []
        assert await listening(b, EVENT_HINTS) == 0
        # The reconnect backs off on the app's clock, then the listener is up again.
        listener = b.app.replica.hints[EVENT_HINTS]
        await run_clock_until(b.clock, listener.is_set)
        ok, report = await healthz(b)
        assert ok and report["hints"][EVENT_HINTS] is True
        assert {EVENT_HINTS, "iris_intake"} <= a.app.replica.hints.keys()


async def healthz(s: Served) -> tuple[bool, dict[str, Any]]:
    async with s.http.get(f"{s.base}/healthz") as res:
        report = await res.json()
        return res.status == 200 and report["ok"], report


async def listening(s: Served, channel: str) -> float:
    _, samples = parse(await s.app.metrics.render())
    return value(samples, "iris_hints_listening", channel=channel)
