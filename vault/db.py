"""The vault connection: one aiosqlite connection, every statement serialized through one lock.

Why a lock around a single connection: aiosqlite runs statements on one worker thread, but two
coroutines sharing the connection interleave their statements — one coroutine's ROLLBACK then
discards another's INSERT. So every transaction is `BEGIN IMMEDIATE … COMMIT/ROLLBACK` under an
`asyncio.Lock`, and reads take the same lock so they never observe another coroutine's
uncommitted rows. Nested `transaction()` calls from the same task would deadlock; they raise.

Timestamps in every table are integer epoch milliseconds, UTC.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiosqlite

from gateway.errors import VaultError

log = logging.getLogger(__name__)

Row = sqlite3.Row
Params = Sequence[Any] | dict[str, Any]

_IN_TRANSACTION: ContextVar[bool] = ContextVar("iris_vault_in_tx", default=False)


class Tx:
    """The handle a transaction body uses; valid only inside `Vault.transaction()`."""

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; return the last inserted rowid (0 when none)."""
        async with self._conn.execute(sql, params) as cur:
            return cur.lastrowid or 0

    async def execute_rowcount(self, sql: str, params: Params = ()) -> int:
        async with self._conn.execute(sql, params) as cur:
            return cur.rowcount

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        await self._conn.executemany(sql, rows)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        async with self._conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        async with self._conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def scalar(self, sql: str, params: Params = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]


class Vault:
    """Owner of the connection. Use as `async with Vault(path) as vault:`."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path) if str(path) != ":memory:" else Path(":memory:")
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        if self._conn is not None or self._closed:
            raise VaultError("vault already opened")
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = await aiosqlite.connect(str(self.path), isolation_level=None)
        except sqlite3.Error as exc:
            raise VaultError(f"cannot open vault {self.path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        self._conn = conn
        try:
            for pragma in (
                "PRAGMA journal_mode=WAL",
                "PRAGMA synchronous=NORMAL",
                f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}",
                "PRAGMA foreign_keys=ON",
            ):
                await conn.execute(pragma)
        except sqlite3.Error as exc:
            await self.close()
            raise VaultError(f"cannot use vault {self.path}: {exc}") from exc

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            async with self._lock:
                await conn.close()

    @property
    def conn(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise VaultError("vault is not open")
        return self._conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """`BEGIN IMMEDIATE`; commit on success, roll back on any exception (then re-raise)."""
        if _IN_TRANSACTION.get():
            raise VaultError("nested vault transaction in the same task")
        conn = self.conn
        async with self._lock:
            token = _IN_TRANSACTION.set(True)
            try:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    yield Tx(conn)
                except BaseException:
                    await conn.execute("ROLLBACK")
                    raise
                await conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise VaultError(f"vault transaction failed: {exc}") from exc
            finally:
                _IN_TRANSACTION.reset(token)

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Tx]:
        """Several reads that see one consistent state, without a write lock on the file."""
        if _IN_TRANSACTION.get():
            raise VaultError("nested vault transaction in the same task")
        conn = self.conn
        async with self._lock:
            token = _IN_TRANSACTION.set(True)
            try:
                yield Tx(conn)
            except sqlite3.Error as exc:
                raise VaultError(f"vault read failed: {exc}") from exc
            finally:
                _IN_TRANSACTION.reset(token)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        async with self.reading() as tx:
            return await tx.fetchall(sql, params)

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        async with self.reading() as tx:
            return await tx.fetchone(sql, params)

    async def scalar(self, sql: str, params: Params = ()) -> Any:
        async with self.reading() as tx:
            return await tx.scalar(sql, params)

    async def user_version(self) -> int:
        return int(await self.scalar("PRAGMA user_version"))

    async def backup(self, target: Path) -> None:
        """SQLite online backup: a consistent copy even while other coroutines write."""
        if await asyncio.to_thread(target.exists):
            raise VaultError(f"backup target already exists: {target}")
        await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
        dest = await aiosqlite.connect(str(target))
        try:
            async with self._lock:
                await self.conn.backup(dest)
        except sqlite3.Error as exc:
            raise VaultError(f"backup failed: {exc}") from exc
        finally:
            await dest.close()
