"""Leadership: which replica does what exactly one process may do (a platform's one receiving
connection: Telegram's `getUpdates` poller, Slack's Socket Mode).

`Leadership.hold(role)` is an async context manager that waits until this replica leads `role`
and yields an event that is set if the leadership is lost (its database session went away);
the holder stops what it leads at once, leaves the block, and may wait to lead again. Leaving
the block resigns. While held, the role is in `Replica.leaderships` (shown by `/healthz` and
`/metrics`).

`SoleLeader` is the one-replica case (the SQLite vault is a local file: one process): every
role is granted at once and never lost. The PostgreSQL implementation, shared by the replicas
of one database, is `vault/pg/leader.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from gateway.core.replica import Replica


class Leadership(Protocol):
    def hold(self, role: str) -> AbstractAsyncContextManager[asyncio.Event]: ...


class SoleLeader:
    """Always the leader: nobody else shares the vault."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica

    @asynccontextmanager
    async def hold(self, role: str) -> AsyncIterator[asyncio.Event]:
        self._replica.lead(role)
        try:
            yield asyncio.Event()  # never set: nothing can take it away
        finally:
            self._replica.resign(role)
