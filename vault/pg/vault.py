"""The vault on PostgreSQL: the same interface as `vault.db.Vault`, other connections.

Two connections, each on a thread of its own (`Worker`): the writer runs the batched bodies of
`run()` inside one `BEGIN … COMMIT` with a SAVEPOINT per body (as on SQLite, in fewer round
trips: `vault/pg/batch.py`) and the cold paths' `transaction()`; the reader (read-only,
autocommit) runs `read()` and `fetchall()`, each statement its own snapshot as on SQLite.
Nothing else changes for the stores: their SQL is translated by `vault/pg/dialect.py`.

The schema version lives in the table `iris_schema` (PostgreSQL has no `user_version`);
`vault/pg/migrate.py` keeps it. `backup()` calls `pg_dump` when it is installed.
Replicas share this database; claiming inbound (`FOR UPDATE SKIP LOCKED`, lease columns) goes
through the same writer, while leader locks live on connections of their own (`leader.py`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gateway.core.errors import ConfigError, VaultError
from vault.batch import Batcher, SyncBody
from vault.db import _IN_TRANSACTION, Params, Row, Vault
from vault.pg.batch import write_batch
from vault.pg.connection import PgRaw, Worker, mapped_errors

T = TypeVar("T")

VERSION_TABLE = "iris_schema"


def redacted(url: str) -> str:
    """The URL as it may be shown: host, port and database, never the password."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://…"
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{host}{port}/{parts.get('dbname') or ''}"


def _reason(exc: BaseException) -> str:
    """The first line of the server's or libpq's message, without the connection string."""
    text = str(exc).strip().splitlines()
    return text[-1].strip() if text else type(exc).__name__


def cannot_connect(key: str, url: str, exc: BaseException) -> ConfigError:
    """A failed connection as one line naming the setting the URL came from (no password)."""
    return ConfigError([f"{key}: cannot connect to {redacted(url)}: {_reason(exc)}"])


class PgTx:
    """`vault.db.Tx` on PostgreSQL: each call one hop to the writer's thread."""

    __slots__ = ("_began", "_worker")

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._began: int | None = None  # the connection a `transaction()` began on

    def began(self) -> None:
        self._began = self._worker.generation

    async def _call(self, fn: Callable[[PgRaw], T]) -> T:
        def guarded(raw: PgRaw) -> T:
            # After a reconnect the statement would run outside the transaction, committed
            # on its own: the transaction fails instead.
            if self._began is not None and self._worker.generation != self._began:
                raise sqlite3.OperationalError("the connection was lost mid-transaction")
            return fn(raw)

        return await self._worker.call(guarded)

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; 0. An id an INSERT drew comes from its `RETURNING` clause
        (`scalar`), the same on both backends: no `lastval()` round trip after every INSERT."""
        await self._call(lambda raw: raw.execute(sql, params))
        return 0

    async def execute_rowcount(self, sql: str, params: Params = ()) -> int:
        return await self._call(lambda raw: raw.execute(sql, params).rowcount)

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        listed = list(rows)
        await self._call(lambda raw: raw.executemany(sql, listed))

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        rows = await self._call(lambda raw: raw.execute(sql, params).fetchall())
        return cast(list[Row], rows)

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        return next(iter(await self.fetchall(sql, params)), None)

    async def scalar(self, sql: str, params: Params = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]


class PgVault(Vault):
    """Owner of the PostgreSQL connections. Use as `async with PgVault(url) as vault:`."""

    dialect = "postgresql"

    def __init__(self, url: str, *, key: str = "vault.url") -> None:
        super().__init__(Path(redacted(url)))
        self.url = url
        self._key = key  # what a connection failure names: the setting the URL came from
        self._pg_writer: Worker | None = None
        self._pg_reader: Worker | None = None
        # The same batches, with the savepoint statements folded into fewer round trips.
        self._writes = Batcher(self._write_hop, write_batch, what="write", lock=self._lock)

    async def open(self) -> None:
        if self._pg_writer is not None or self._closed:
            raise VaultError("vault already opened")
        try:
            self._pg_writer = await Worker.open(self.url, "vault-pg-writer")
            self._pg_reader = await Worker.open(self.url, "vault-pg-reader", read_only=True)
        except Exception as exc:
            await self.close()
            raise cannot_connect(self._key, self.url, exc) from exc

    async def close(self) -> None:
        self._closed = True
        await self._writes.idle()
        await self._reads.idle()
        writer, self._pg_writer = self._pg_writer, None
        reader, self._pg_reader = self._pg_reader, None
        if reader is not None:
            await reader.close()
        if writer is not None:
            async with self._lock:
                await writer.close()

    def _worker(self, worker: Worker | None) -> Worker:
        if worker is None:
            raise VaultError("vault is not open")
        return worker

    async def _write_hop(self, fn: SyncBody[T]) -> T:
        # PgRaw is the sqlite3.Connection the bodies are written against (`connection.py`).
        return await self._worker(self._pg_writer).call(cast(Callable[[PgRaw], T], fn))

    async def _read_hop(self, fn: SyncBody[T]) -> T:
        return await self._worker(self._pg_reader).call(cast(Callable[[PgRaw], T], fn))

    async def on_writer(self, fn: Callable[[PgRaw], T]) -> T:
        """Run `fn` on the writer connection exclusively, after the writes queued before it
        (migrations, copies: `fn` manages its own transactions)."""
        worker = self._worker(self._pg_writer)
        await self._writes.submit(lambda raw: None)
        async with self._lock:
            return await worker.call(fn)

    @asynccontextmanager
    async def writer(self) -> AsyncIterator[PgTx]:  # type: ignore[override]
        if _IN_TRANSACTION.get():
            raise VaultError("nested vault transaction in the same task")
        worker = self._worker(self._pg_writer)
        await self._writes.submit(lambda raw: None)
        async with self._lock:
            token = _IN_TRANSACTION.set(True)
            try:
                yield PgTx(worker)
            except sqlite3.Error as exc:  # psycopg's, mapped by `PgRaw`
                raise VaultError(f"vault write failed: {exc}") from exc
            finally:
                _IN_TRANSACTION.reset(token)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PgTx]:  # type: ignore[override]
        """`BEGIN`; commit on success, roll back on any exception (then re-raise)."""
        async with self.writer() as tx:
            worker = self._worker(self._pg_writer)
            await _shielded(worker.call(lambda raw: raw.execute("BEGIN")))
            tx.began()
            try:
                yield tx
            except BaseException:
                await _shielded(worker.call(lambda raw: raw.execute("ROLLBACK")))
                raise
            await tx.execute("COMMIT")  # guarded: never a COMMIT on a new, empty session

    def problem(self) -> str | None:
        """Why the vault cannot be used now (a lost connection, reconnecting), else None."""
        for worker in (self._pg_writer, self._pg_reader):
            if worker is not None and worker.problem is not None:
                return worker.problem
        return None

    def connections(self) -> int:
        """Connections made so far (it grows with each reconnect): a turn that saw it change
        ran while the vault was away, even if it is back by the time the turn failed."""
        return sum(w.generation for w in (self._pg_writer, self._pg_reader) if w is not None)

    async def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints on its own."""

    async def run_checkpoints(
        self, sleep: Callable[[float], Awaitable[None]], interval_s: float = 1.0
    ) -> None:
        """Nothing to run on PostgreSQL; waits until cancelled like the SQLite job."""
        await asyncio.Event().wait()

    async def user_version(self) -> int:
        return await self.on_writer(schema_version)

    async def backup(self, target: Path) -> None:
        """`pg_dump --format=custom` into `target` (restore with `pg_restore`)."""
        if await asyncio.to_thread(target.exists):
            raise VaultError(f"backup target already exists: {target}")
        pg_dump = shutil.which("pg_dump")
        if pg_dump is None:
            raise VaultError(
                "backup of a PostgreSQL vault needs pg_dump (the PostgreSQL client tools), "
                "which is not on PATH"
            )
        try:
            await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            why = (
                f"{target.parent} is not a directory"
                if isinstance(exc, FileExistsError | NotADirectoryError)
                else exc.strerror
            )
            raise VaultError(f"cannot write the backup to {target}: {why}") from exc
        # The password goes in pg_dump's environment, not its command line (which any local
        # user can read while it runs); the dump goes to a side file, renamed when complete,
        # so a failed dump leaves no empty file that would refuse the next try.
        params = conninfo_to_dict(self.url)
        password = params.pop("password", None)
        env = {**os.environ, **({"PGPASSWORD": str(password)} if password else {})}
        # Its own side file: two backups to the same target at once must not write into one.
        partial = target.with_name(f"{target.name}.{os.urandom(4).hex()}.partial")
        dbname = make_conninfo("", **params)
        process = await asyncio.create_subprocess_exec(
            pg_dump, "--format=custom", f"--file={partial}", f"--dbname={dbname}",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            try:
                _, err = await process.communicate()
            finally:
                if process.returncode is None:  # cancelled: the dump stops too
                    process.kill()
                    await asyncio.shield(process.wait())
            if process.returncode != 0:
                reason = err.decode(errors="replace").strip().splitlines()
                raise VaultError(f"pg_dump failed: {reason[-1] if reason else process.returncode}")
            await asyncio.to_thread(_place, partial, target)
        finally:
            await asyncio.to_thread(partial.unlink, missing_ok=True)


def _place(partial: Path, target: Path) -> None:
    """The finished dump at `target`, never replacing a backup that finished first: a hard
    link (atomic, refuses an existing name), or where the file system has none (some network
    mounts, vfat) a rename after a last look."""
    try:
        os.link(partial, target)
    except FileExistsError:
        raise VaultError(f"backup target already exists: {target}") from None
    except OSError:
        if target.exists():
            raise VaultError(f"backup target already exists: {target}") from None
        os.rename(partial, target)


def schema_version(raw: PgRaw) -> int:
    """The version in `iris_schema`, 0 for a database Iris never migrated."""
    with mapped_errors():
        exists = raw.pg.execute(b"SELECT to_regclass('iris_schema') IS NOT NULL").fetchone()
        if exists is None or not exists[0]:
            return 0
        row = raw.pg.execute(b"SELECT version FROM iris_schema").fetchone()
    return 0 if row is None else int(row[0])


async def _shielded(step: Awaitable[Any]) -> None:
    """A BEGIN/ROLLBACK already on its way runs to the end, also when we are cancelled."""
    started = asyncio.ensure_future(step)
    try:
        await asyncio.shield(started)
    except asyncio.CancelledError:
        await asyncio.wait([started])
        raise
