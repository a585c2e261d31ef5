"""A vault whose batched bodies run on the event loop's own thread: for throwaway vaults only.

`Vault` sends every batch of bodies (`run`, `read`, `fetchall`, …) to an aiosqlite worker
thread so that a slow statement never stalls the event loop of a serving gateway. A process
that owns a vault alone and only computes — the simulator, driving the real stores, policy
and engine on a virtual clock — pays for that hop (a queue put, a thread wake-up, a self-pipe
write to wake the loop, then the two threads taking turns on the interpreter lock) far more
than for the SQL. `InlineVault` runs those batches where they are submitted, inside the same
`Batcher` (bodies submitted together still share one transaction, each in its own
SAVEPOINT), so the stores cannot tell the difference.

The connections are opened without sqlite3's same-thread check: the cold paths
(`transaction()`, `checkpoint()`, `backup()`) still go through aiosqlite's worker thread.
That is safe because each connection is used by one side at a time: the writer lock is held
around every write hop and every `transaction()`, and the reader is only used by read hops.
Never use this for a vault a gateway serves from.
"""

from __future__ import annotations

from typing import Any, TypeVar

import aiosqlite

from vault.batch import SyncBody, raw_connection
from vault.db import Vault

T = TypeVar("T")


class InlineVault(Vault):
    """`Vault` with its batched reads and writes run on the calling (event loop) thread."""

    async def _connect(self, *pragmas: str, **kwargs: Any) -> aiosqlite.Connection:
        return await super()._connect(*pragmas, check_same_thread=False, **kwargs)

    async def _write_hop(self, fn: SyncBody[T]) -> T:
        return fn(raw_connection(self.conn))

    async def _read_hop(self, fn: SyncBody[T]) -> T:
        return fn(raw_connection(self._read_conn))
