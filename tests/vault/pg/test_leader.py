"""Leadership on a real PostgreSQL: one leader per role, takeover after the leader's session
ends, resigning at once when the held session is gone. Time (the retry interval) is a manual
clock; the database is real."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg

from gateway.core.clock import ManualClock
from gateway.core.replica import Replica
from tests.fakes.clock import until
from vault.pg.leader import PgLeadership

RETRY_S = 5.0
ROLE = "telegram-polling"


class Contender:
    """A replica that wants `ROLE`, holds it until told to stop or it is lost, then waits to
    lead again (as the app's receiving loop does)."""

    def __init__(self, url: str, name: str, clock: ManualClock) -> None:
        self.replica = Replica(name)
        self.leadership = PgLeadership(url, replica=self.replica, clock=clock, retry_s=RETRY_S)
        self.leading = asyncio.Event()
        self.losses = 0

    async def run(self) -> None:
        while True:
            async with self.leadership.hold(ROLE) as lost:
                self.leading.set()
                await lost.wait()
                self.leading.clear()
                self.losses += 1


@contextlib.asynccontextmanager
async def running(*contenders: Contender) -> AsyncIterator[None]:
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(c.run()) for c in contenders]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()


async def holders(url: str) -> list[int]:
    """Backend pids holding an advisory lock in this database."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return [int(row[0]) for row in await cursor.fetchall()]


async def terminate(url: str, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))  # waits for it


async def test_two_racing_for_a_role_one_leads(pg_url: str) -> None:
    clock = ManualClock()
    a, b = Contender(pg_url, "a", clock), Contender(pg_url, "b", clock)
    async with running(a, b):
        # Both have tried once: the leader watches its session, the other waits to retry.
        await until(lambda: clock.sleepers == 2)
        assert a.leading.is_set() != b.leading.is_set()
        assert len(await holders(pg_url)) == 1
        for _ in range(3):  # retries change nothing while the leader lives
            clock.advance(RETRY_S)
            await until(lambda: clock.sleepers == 2)
        leader, standby = (a, b) if a.leading.is_set() else (b, a)
        assert leader.replica.leaderships == {ROLE}
        assert standby.replica.leaderships == set()
        assert not standby.leading.is_set()


async def test_a_killed_leader_session_is_taken_over_within_the_retry_interval(
    pg_url: str,
) -> None:
    clock = ManualClock()
    a, b = Contender(pg_url, "a", clock), Contender(pg_url, "b", clock)
    async with running(a, b):
        await until(lambda: clock.sleepers == 2)
        leader, standby = (a, b) if a.leading.is_set() else (b, a)
        [pid] = await holders(pg_url)
        await terminate(pg_url, pid)  # the leader's database session dies
        started_ms = clock.now_ms()
        clock.advance(RETRY_S)  # one retry interval: the standby's next try, the leader's check
        await until(lambda: standby.leading.is_set() and leader.losses == 1)
        assert clock.now_ms() - started_ms <= RETRY_S * 1000
        assert standby.replica.leaderships == {ROLE}
        assert leader.replica.leaderships == set()  # it resigned at once
        assert len(await holders(pg_url)) == 1
        # The old leader now stands by behind the new one.
        await until(lambda: clock.sleepers == 2)
        assert not leader.leading.is_set()


async def test_leaving_the_block_frees_the_role_for_the_next(pg_url: str) -> None:
    clock = ManualClock()
    first = PgLeadership(pg_url, replica=Replica("first"), clock=clock, retry_s=RETRY_S)
    async with first.hold(ROLE):
        assert len(await holders(pg_url)) == 1
    assert await holders(pg_url) == []
    second = Replica("second")
    async with PgLeadership(pg_url, replica=second, clock=clock).hold(ROLE):
        assert second.leaderships == {ROLE}  # at once: no retry interval to wait out


async def test_roles_are_independent(pg_url: str) -> None:
    clock = ManualClock()
    replica = Replica("a")
    leadership = PgLeadership(pg_url, replica=replica, clock=clock)
    async with leadership.hold("telegram-polling"), leadership.hold("slack-socket-mode"):
        assert replica.leaderships == {"telegram-polling", "slack-socket-mode"}
        assert len(await holders(pg_url)) == 2
