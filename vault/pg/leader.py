"""Leadership among the replicas of one PostgreSQL vault: a session-level advisory lock per role
(`gateway/core/leadership.py` says what a role is), each on a connection of its own.

Why a session lock on a dedicated connection: PostgreSQL releases it the moment the session
ends — the leader's process exits or is killed (its socket closes), its backend is terminated,
or the server gives up on a silent client — so no lease has to be renewed and no row can be
left claiming a dead leader. The vault's own connections are not used: a lock held by them
would live and die with the store's batching, and a role must be lost exactly when the session
that holds it is.

- Waiting: a replica that does not lead tries `pg_try_advisory_lock` every `retry_s` (5 s by
  default, `[vault] leader_retry_s`) on a standby connection it keeps, so another replica
  takes over at most `retry_s` after the leader's session ended.
- Holding: every `retry_s` the held connection is asked `SELECT 1` (bounded by
  `check_timeout_s`). An error or no answer means the session, and so the lock, may be gone:
  the role is resigned at once (the `lost` event), before anyone else can have taken it for
  long. The replica that lost it waits one `retry_s` before trying again, so a standby whose
  session is sound takes the role rather than the one whose session just failed.
- A leader cut off by the network: libpq's keepalives end our side; the session asks the
  server to probe the client after 5 s idle, every 5 s, 3 times (`tcp_keepalives_*`), so the
  server ends the session — and frees the lock — within about 20 s. With `retry_s` = 5 that
  keeps a takeover within 30 s, and the old leader has stopped (its check failed) by then.

Connections are direct (autocommit); PgBouncer's transaction pooling would break session
locks, as it breaks LISTEN.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg

from gateway.core.errors import VaultError
from gateway.core.ports import Clock
from gateway.core.replica import Replica
from vault.pg.vault import cannot_connect

log = logging.getLogger(__name__)

RETRY_S = 5.0
CHECK_TIMEOUT_S = 5.0
SERVER_KEEPALIVES = (
    b"SET tcp_keepalives_idle = 5",
    b"SET tcp_keepalives_interval = 5",
    b"SET tcp_keepalives_count = 3",
)
Conn = psycopg.AsyncConnection[tuple[object, ...]]


def lock_key(role: str) -> int:
    """The advisory lock key of a role: a stable signed 64-bit number."""
    digest = hashlib.sha256(f"iris leader {role}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PgLeadership:
    def __init__(
        self,
        url: str,
        *,
        replica: Replica,
        clock: Clock,
        retry_s: float = RETRY_S,
        check_timeout_s: float = CHECK_TIMEOUT_S,
    ) -> None:
        self._url = url
        self._replica = replica
        self._clock = clock
        self._retry_s = retry_s
        self._check_timeout_s = check_timeout_s
        # Roles this replica just lost: its next try waits one interval, so a standby whose
        # session is sound takes the role rather than the replica that just lost it.
        self._lost: set[str] = set()

    @asynccontextmanager
    async def hold(self, role: str) -> AsyncIterator[asyncio.Event]:
        conn = await self._acquire(role)
        lost = asyncio.Event()
        self._replica.lead(role)
        log.info("replica %s leads %s", self._replica.id, role)
        try:
            async with asyncio.TaskGroup() as tg:
                watch = tg.create_task(self._watch(conn, role, lost), name=f"leader {role}")
                try:
                    yield lost
                finally:
                    watch.cancel()
        finally:
            self._replica.resign(role)
            await _close(conn)  # ends the session: the lock is free for the next leader

    async def _acquire(self, role: str) -> Conn:
        """Wait until this replica holds the role's lock; the connection that holds it."""
        key = lock_key(role)
        conn: Conn | None = None
        said_standby = said_down = False
        if role in self._lost:
            self._lost.discard(role)
            await self._clock.sleep(self._retry_s)
        try:
            while True:
                try:
                    if conn is None:
                        conn = await self._connect(role)
                    cursor = await conn.execute(b"SELECT pg_try_advisory_lock(%s)", (key,))
                    row = await cursor.fetchone()
                    if row is not None and row[0]:
                        held, conn = conn, None
                        return held
                    if not said_standby:
                        log.info("replica %s: standby for %s (another replica leads); trying "
                                 "every %g s", self._replica.id, role, self._retry_s)  # fmt: skip
                        said_standby = True
                    said_down = False
                except psycopg.Error as exc:
                    if not said_down:
                        log.warning("replica %s: cannot reach PostgreSQL to lead %s (%s); "
                                    "retrying every %g s", self._replica.id, role,
                                    type(exc).__name__, self._retry_s)  # fmt: skip
                        said_down = True
                    await _close(conn)
                    conn = None
                await self._clock.sleep(self._retry_s)
        finally:
            await _close(conn)

    async def _connect(self, role: str) -> Conn:
        conn = await psycopg.AsyncConnection.connect(
            self._url,
            autocommit=True,
            application_name=f"iris {self._replica.id} leader {role}"[:63],
            keepalives=1,  # libpq's side of noticing a silent server
            keepalives_idle=5,
            keepalives_interval=5,
            keepalives_count=3,
        )
        try:
            for statement in SERVER_KEEPALIVES:
                await conn.execute(statement)
        except BaseException:
            await _close(conn)
            raise
        return conn

    async def _watch(self, conn: Conn, role: str, lost: asyncio.Event) -> None:
        """Until the held session stops answering: then resign at once."""
        try:
            while True:
                await self._clock.sleep(self._retry_s)
                async with asyncio.timeout(self._check_timeout_s):
                    await conn.execute(b"SELECT 1")
        except (psycopg.Error, TimeoutError) as exc:
            log.warning("replica %s: lost the session holding %s (%s); stopping it now",
                        self._replica.id, role, type(exc).__name__)  # fmt: skip
            self._replica.resign(role)
            self._lost.add(role)
            lost.set()


async def _close(conn: Conn | None) -> None:
    if conn is None:
        return
    with contextlib.suppress(psycopg.Error):  # a broken session is gone either way
        await conn.close()


@asynccontextmanager
async def held_alone(url: str, name: str, busy: str) -> AsyncIterator[None]:
    """Hold `name`'s advisory lock for the block, on a session of its own, or raise
    `VaultError(busy)` at once when another session holds it (`iris chat`: one terminal chat
    per database, as `vault.lock.one_chat` is per file)."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            url, autocommit=True, application_name=f"iris {name}"[:63]
        )
    except psycopg.Error as exc:  # worded as the vault's own connection failure is
        raise cannot_connect("vault.url", url, exc) from exc
    try:
        cursor = await conn.execute(b"SELECT pg_try_advisory_lock(%s)", (lock_key(name),))
        row = await cursor.fetchone()
        if row is None or not row[0]:
            raise VaultError(busy)
        yield
    finally:
        await _close(conn)  # ends the session: the lock is free
