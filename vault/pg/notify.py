"""Wake-up hints between replicas: PostgreSQL's LISTEN/NOTIFY on a dedicated connection.

A replica that leaves work to others (a message saved for a chat another replica holds, chats
given up when stopping) sends `pg_notify(channel, payload)` in the transaction that makes the
work visible; PostgreSQL delivers it at commit to every session listening on the channel. A
hint only says "look now": it may be lost (a listener reconnecting, a replica starting), so
whoever listens also polls at a bounded interval as the fallback, and a hint never carries
anything that is not also in the tables.

Needs a DIRECT connection (or session pooling): LISTEN belongs to the server session, and a
transaction-pooling proxy (PgBouncer in `pool_mode = transaction`) hands the session to other
clients after each transaction, so notifications never arrive — the replicas then work at the
poll's pace only. The connection is the vault's URL, opened here apart from the vault's
writer and reader (a LISTEN must not wait behind their statements).

`Notifications.run(deliver)` calls `deliver(payload)` for each notification on the event
loop, and `deliver("")` once after every (re)connection: hints may have been missed
meanwhile, so the receiver rescans. A lost connection is retried with backoff (logged once
per outage); `listening` is set while LISTEN is in effect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

RESYNC = ""  # delivered after each (re)connection: rescan, hints may have been missed


class Notifications:
    def __init__(
        self,
        url: str,
        channel: str,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self.url = url
        self.channel = channel
        self.listening = asyncio.Event()
        self._sleep = sleep
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s

    async def run(self, deliver: Callable[[str], None]) -> None:
        """Listen until cancelled, reconnecting after a lost connection."""
        delay = self._backoff_s
        failing = False
        try:
            while True:
                try:
                    await self._listen(deliver, recovered=failing)
                except psycopg.Error as exc:
                    if self.listening.is_set():  # it was up: a new outage
                        failing, delay = False, self._backoff_s
                    self.listening.clear()
                    if not failing:
                        log.warning(
                            "no %s hints (%s); polling only, reconnecting with backoff",
                            self.channel,
                            type(exc).__name__,
                        )
                    failing = True
                await self._sleep(delay)
                delay = min(delay * 2, self._backoff_max_s)
        finally:
            self.listening.clear()

    async def _listen(self, deliver: Callable[[str], None], *, recovered: bool) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            self.listening.set()
            if recovered:
                log.info("listening for %s hints again", self.channel)
            deliver(RESYNC)
            async with aclosing(conn.notifies()) as notifications:
                async for note in notifications:
                    deliver(note.payload)
