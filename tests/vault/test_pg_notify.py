"""The wake-up hints on a real PostgreSQL: delivered at commit, a resync after every
(re)connection, and listening again after the server drops the connection."""

from __future__ import annotations

import asyncio

import psycopg

from gateway.core.clock import ManualClock
from tests.fakes.clock import run_clock_until
from vault.pg.notify import RESYNC, Notifications


class Heard:
    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.changed = asyncio.Condition()

    def __call__(self, payload: str) -> None:
        self.payloads.append(payload)
        asyncio.get_running_loop().create_task(self._tell())

    async def _tell(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait(self, count: int) -> list[str]:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: len(self.payloads) >= count), 5)
        return self.payloads


def notify(url: str, payload: str, *, commit: bool = True) -> None:
    with psycopg.connect(url) as conn:  # a transaction: NOTIFY goes out at its commit
        conn.execute(b"SELECT pg_notify('hints', %s)", (payload,))
        if not commit:
            conn.rollback()


async def test_hints_arrive_at_commit_and_after_the_server_drops_the_listener(
    pg_url: str,
) -> None:
    clock, heard = ManualClock(), Heard()
    listener = Notifications(pg_url, "hints", sleep=clock.sleep)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(listener.run(heard))
        await asyncio.wait_for(listener.listening.wait(), 5)
        await asyncio.to_thread(notify, pg_url, "rolled back", commit=False)
        await asyncio.to_thread(notify, pg_url, "chat 1")
        assert await heard.wait(2) == [RESYNC, "chat 1"]

        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                b"""SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE query = 'LISTEN "hints"' AND pid <> pg_backend_pid()"""
            )
        # The loss is noticed, the backoff waits on the clock, then it listens again.
        await run_clock_until(clock, lambda: len(heard.payloads) >= 3)
        await asyncio.wait_for(listener.listening.wait(), 5)
        await asyncio.to_thread(notify, pg_url, "chat 2")
        assert await heard.wait(4) == [RESYNC, "chat 1", RESYNC, "chat 2"]
        task.cancel()
    assert not listener.listening.is_set()
