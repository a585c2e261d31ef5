"""The vault connections: one writer, one reader, every write serialized.

Why serialize writes around the single writer connection: aiosqlite runs statements on one
worker thread, but two coroutines sharing the connection interleave their statements — one
coroutine's ROLLBACK then discards another's INSERT. So every write is a whole transaction
that nothing else interleaves with:

- `run(body)` (the hot paths): `body(connection)` is a synchronous transaction body. Bodies
  submitted while the writer is busy are queued and then run together, on the writer's thread
  in one hop, inside one `BEGIN IMMEDIATE … COMMIT` (group commit, see `Batcher`). Each body
  runs in a SAVEPOINT of its own: a body that raises undoes only its own statements and its
  exception goes to its own caller; every caller resumes after the shared COMMIT.
- `transaction()` (cold paths: migrations, admin, commands): an async `BEGIN IMMEDIATE …
  COMMIT/ROLLBACK` holding the writer lock, one thread hop per statement.

Nested writes from the same task would deadlock; they raise.

Reads go to a second, read-only connection (WAL lets it run beside the writer): they never
wait for the writer and only ever see committed rows; each statement is its own consistent
snapshot. Reads submitted at the same time share one thread hop too. A third connection runs
WAL checkpoints in the background, off the writer.

Timestamps in every table are integer epoch milliseconds, UTC.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import aiosqlite

from gateway.core.errors import VaultError
from vault.batch import Batcher, SyncBody, on_connection_thread, read_batch, write_batch

log = logging.getLogger(__name__)

Row = sqlite3.Row
Params = Sequence[Any] | dict[str, Any]

_IN_TRANSACTION: ContextVar[bool] = ContextVar("iris_vault_in_tx", default=False)

T = TypeVar("T")
AUTOCHECKPOINT_PAGES = 10_000  # ~40 MiB of WAL before a commit checkpoints by itself
CHECKPOINT_INTERVAL_S = 1.0


async def _open(conn: aiosqlite.Connection, begin: str, undo: str) -> None:
    """Start a transaction, also when our task is cancelled meanwhile.

    The BEGIN is already queued on the connection's thread and will run; if we were cancelled
    while it did, close it again before re-raising — an open transaction left behind would
    make every later BEGIN on this connection fail.
    """
    started = asyncio.ensure_future(conn.execute_fetchall(begin))
    try:
        await asyncio.shield(started)
    except asyncio.CancelledError:
        await asyncio.wait([started])
        if not started.cancelled() and started.exception() is None:
            await asyncio.wait([asyncio.ensure_future(conn.execute_fetchall(undo))])
        raise


def _nothing(raw: sqlite3.Connection) -> None:
    return None


def _log_failure(done: asyncio.Future[Any], what: str) -> None:
    if not done.cancelled() and (exc := done.exception()) is not None:
        log.error("could not save %s: %s", what, exc)


class Tx:
    """The handle a transaction body uses; valid only inside `Vault.transaction()`.

    Each method is exactly one hop to aiosqlite's worker thread (`execute_fetchall`,
    `execute_insert`): a cursor opened with `async with conn.execute()` costs three more.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; return the last inserted rowid (0 when none)."""
        row = await self._conn.execute_insert(sql, params)
        return int(row[0]) if row and row[0] is not None else 0

    async def execute_rowcount(self, sql: str, params: Params = ()) -> int:
        before = self._conn.total_changes
        await self._conn.execute_fetchall(sql, params)
        return self._conn.total_changes - before

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        await self._conn.executemany(sql, rows)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return list(await self._conn.execute_fetchall(sql, params))

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        rows = await self._conn.execute_fetchall(sql, params)
        return next(iter(rows), None)

    async def scalar(self, sql: str, params: Params = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]


class Vault:
    """Owner of the connections. Use as `async with Vault(path) as vault:`.

    `vault.pg.PgVault` is the same interface on PostgreSQL (`dialect` tells them apart).
    """

    dialect = "sqlite"

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._checkpointer: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._writes = Batcher(self._write_hop, write_batch, what="write", lock=self._lock)
        self._reads = Batcher(self._read_hop, read_batch, what="read")
        self._closed = False

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        if self._writer is not None or self._closed:
            raise VaultError("vault already opened")
        try:
            await asyncio.to_thread(self.path.parent.mkdir, parents=True, exist_ok=True)
            self._writer = await self._connect(
                "PRAGMA journal_mode=WAL",
                "PRAGMA synchronous=NORMAL",
                "PRAGMA foreign_keys=ON",
                # Checkpoints (and their fsync) would stall whichever commit crosses the
                # threshold: `run_checkpoints` does them off the writer; this is the backstop.
                f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}",
            )
            self._reader = await self._connect("PRAGMA query_only=ON")
            self._checkpointer = await self._connect()
        except (OSError, sqlite3.Error) as exc:
            await self.close()
            raise VaultError(f"cannot open vault {self.path}: {exc}") from exc

    async def _connect(self, *pragmas: str, **kwargs: Any) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(str(self.path), isolation_level=None, **kwargs)
        conn.row_factory = sqlite3.Row
        try:
            for pragma in (f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}", *pragmas):
                await conn.execute_fetchall(pragma)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def close(self) -> None:
        self._closed = True
        await self._writes.idle()
        await self._reads.idle()
        writer, self._writer = self._writer, None
        reader, self._reader = self._reader, None
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            await checkpointer.close()
        if reader is not None:
            await reader.close()
        if writer is not None:
            async with self._lock:
                await writer.close()

    async def _write_hop(self, fn: SyncBody[T]) -> T:
        return await on_connection_thread(self.conn, fn)

    async def _read_hop(self, fn: SyncBody[T]) -> T:
        return await on_connection_thread(self._read_conn, fn)

    @property
    def conn(self) -> aiosqlite.Connection:
        """The writer connection."""
        if self._writer is None:
            raise VaultError("vault is not open")
        return self._writer

    @property
    def _read_conn(self) -> aiosqlite.Connection:
        if self._reader is None:
            raise VaultError("vault is not open")
        return self._reader

    @asynccontextmanager
    async def writer(self) -> AsyncIterator[Tx]:
        """The writer connection, exclusively, without BEGIN (`transaction()` adds it).

        Writes queued with `run`/`run_soon` before this call commit first: a no-op body queued
        behind them is the barrier, so batched and async writes keep their submission order.
        """
        if _IN_TRANSACTION.get():
            raise VaultError("nested vault transaction in the same task")
        conn = self.conn
        await self._writes.submit(_nothing)
        async with self._lock:
            token = _IN_TRANSACTION.set(True)
            try:
                yield Tx(conn)
            except sqlite3.Error as exc:
                raise VaultError(f"vault write failed: {exc}") from exc
            finally:
                _IN_TRANSACTION.reset(token)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """`BEGIN IMMEDIATE`; commit on success, roll back on any exception (then re-raise)."""
        async with self.writer() as tx:
            conn = self.conn
            await _open(conn, "BEGIN IMMEDIATE", "ROLLBACK")
            try:
                yield tx
            except BaseException:
                await conn.execute_fetchall("ROLLBACK")
                raise
            await conn.execute_fetchall("COMMIT")

    async def run(self, body: SyncBody[T]) -> T:
        """Run `body(connection)` as an atomic write, committed when this returns.

        For the hot paths: `body` runs on the writer's thread, with whatever other bodies were
        submitted meanwhile, in one transaction (see `vault/batch.py`); only its own statements
        are undone if it raises. `body` must be quick, pure SQL work: it holds the writer.
        """
        if _IN_TRANSACTION.get():
            raise VaultError("nested vault transaction in the same task")
        return await self._writes.submit(body)

    def run_soon(self, body: SyncBody[Any], what: str) -> None:
        """Queue `body` like `run`, without waiting for it (write-behind).

        For bookkeeping a turn need not wait for: it starts no thread hop (no transaction) of
        its own but commits with the next batch, at most `LAZY_S` (50 ms) later, before any
        write submitted after it (batches run in submission order), and before `idle()` or
        `close()` returns. A failure is logged with `what`; nobody else learns of it.
        """
        if _IN_TRANSACTION.get():
            raise VaultError("nested vault transaction in the same task")
        self._writes.queue(body, lazy=True).add_done_callback(lambda done: _log_failure(done, what))

    async def write(self, sql: str, params: Params = ()) -> list[Row]:
        """One statement as its own atomic write. Returns its rows (use `RETURNING`)."""
        return await self.run(lambda raw: raw.execute(sql, params).fetchall())

    async def write_rowcount(self, sql: str, params: Params = ()) -> int:
        return await self.run(lambda raw: raw.execute(sql, params).rowcount)

    async def read(self, body: SyncBody[T]) -> T:
        """Run `body(connection)` on the read-only connection, beside other reads.

        Each statement sees the latest committed state on its own (no snapshot across the
        body's statements). Return values, never a cursor: an unfinished statement would hold
        the reader's snapshot open.
        """
        return await self._reads.submit(body)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._reads.submit(lambda raw: raw.execute(sql, params).fetchall())

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        return next(iter(await self.fetchall(sql, params)), None)

    async def scalar(self, sql: str, params: Params = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]

    async def idle(self) -> None:
        """Wait until every write and read submitted so far has run."""
        await self._writes.idle()
        await self._reads.idle()

    def problem(self) -> str | None:
        """Why the vault cannot be used now, else None (a local file: never down)."""
        return None

    def connections(self) -> int:
        """Connections made so far: one file, opened once."""
        return 1

    async def checkpoint(self) -> None:
        """A PASSIVE WAL checkpoint on its own connection and thread: it copies what it can
        without waiting for, or blocking, the writer and readers."""
        if self._checkpointer is None:
            raise VaultError("vault is not open")
        try:
            await self._checkpointer.execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            raise VaultError(f"checkpoint failed: {exc}") from exc

    async def run_checkpoints(
        self, sleep: Callable[[float], Awaitable[None]], interval_s: float = CHECKPOINT_INTERVAL_S
    ) -> None:
        """Checkpoint every `interval_s` until cancelled (a background job of the app)."""
        while True:
            await sleep(interval_s)
            try:
                await self.checkpoint()
            except VaultError as exc:
                log.warning("%s", exc)

    async def user_version(self) -> int:
        return int(await self.scalar("PRAGMA user_version"))

    async def backup(self, target: Path) -> None:
        """SQLite online backup: a consistent copy even while other coroutines write."""
        if await asyncio.to_thread(target.exists):
            raise VaultError(f"backup target already exists: {target}")
        try:
            await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
            dest = await aiosqlite.connect(str(target))
        except (OSError, sqlite3.Error) as exc:
            why = (
                f"{target.parent} is not a directory"
                if isinstance(exc, FileExistsError | NotADirectoryError)
                else (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
            )
            raise VaultError(f"cannot write the backup to {target}: {why}") from exc
        try:
            async with self._lock:
                await self.conn.backup(dest)
        except sqlite3.Error as exc:
            raise VaultError(f"backup failed: {exc}") from exc
        finally:
            await dest.close()
