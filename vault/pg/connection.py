"""A psycopg connection that the stores' synchronous bodies can use as if it were sqlite3's.

Why psycopg 3 (sync) rather than asyncpg: the hot paths are synchronous transaction bodies run
on the writer's thread inside one group commit, each in a SAVEPOINT (`vault/batch.py`). A sync
psycopg connection on a thread of its own runs those same bodies unchanged, so the group-commit
design carries over; asyncpg would force every body to become a coroutine.

`PgRaw` implements the part of `sqlite3.Connection` the bodies use — `execute(sql, params)`
returning a cursor (`fetchall`, `fetchone`, `rowcount`, `lastrowid`), `executemany`,
`in_transaction` — translating each statement once (`vault/pg/dialect.py`). Rows index by
position and by column name, like `sqlite3.Row`. psycopg's errors are raised as the sqlite3
class of the same DB-API name (IntegrityError, OperationalError, …) with the original as the
cause, so the batch's error handling and the stores' `except` clauses hold on both backends.
Python bools go in as 0/1 (the schema keeps SQLite's integer flags), and numeric results
(SUM/AVG over BIGINT) come back as int when whole, else float.

Each `Worker` owns one connection and the one thread it is used on. When PostgreSQL goes away
(a restart, a failover, `pg_terminate_backend`) the connection breaks: the call that finds it
broken fails, and the next call reconnects — at most one attempt per backoff step (1 s
doubling to 30 s), calls in between failing at once without touching the network, so nothing
loops. `problem` says why the vault is down until a reconnect succeeds; `generation` counts
connections, so a transaction that spanned a reconnect is refused instead of committing half.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from decimal import Decimal
from typing import Any, TypeVar

import psycopg
from psycopg.adapt import Buffer, Dumper, Loader
from psycopg.pq import TransactionStatus
from psycopg.rows import RowMaker
from psycopg.types.string import TextLoader

from vault.pg.dialect import translate

log = logging.getLogger(__name__)

T = TypeVar("T")
BACKOFF_S = (1.0, 30.0)  # the first wait after a failed reconnect, and the longest
Params = Sequence[Any] | dict[str, Any]

_ERRORS: tuple[tuple[type[psycopg.Error], type[sqlite3.Error]], ...] = (
    (psycopg.IntegrityError, sqlite3.IntegrityError),
    (psycopg.OperationalError, sqlite3.OperationalError),
    (psycopg.ProgrammingError, sqlite3.ProgrammingError),
    (psycopg.DataError, sqlite3.DataError),
    (psycopg.NotSupportedError, sqlite3.NotSupportedError),
    (psycopg.InternalError, sqlite3.InternalError),
    (psycopg.InterfaceError, sqlite3.InterfaceError),
    (psycopg.DatabaseError, sqlite3.DatabaseError),
)


@contextmanager
def mapped_errors() -> Iterator[None]:
    """psycopg's error -> sqlite3's class of the same DB-API name, chained."""
    try:
        yield
    except psycopg.Error as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(f"{type(exc).__name__}: {exc}".strip()) from exc
        raise sqlite3.Error(str(exc)) from exc


class PgRow(tuple[Any, ...]):
    """A result row: `row[0]`, `row["name"]`, `dict(row)`, `row.keys()` as with sqlite3.Row."""

    _names: tuple[str, ...]

    def __new__(cls, values: Sequence[Any], names: tuple[str, ...]) -> PgRow:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise IndexError(f"no such column: {key}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[PgRow]:
    names = tuple(c.name for c in cursor.description or ())
    return lambda values: PgRow(values, names)


class _BoolAsInt(Dumper):
    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: Any) -> Buffer:
        return b"1" if obj else b"0"


class _WholeNumeric(Loader):
    def load(self, data: Buffer) -> Any:
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


def _with_arrays(params: Params, arrays: tuple[int | str, ...]) -> Params:
    """The JSON-array parameters of `json_each(?)` as lists (`= ANY(%s)` on PostgreSQL)."""
    if not arrays:
        return params
    if isinstance(params, dict):
        return {k: json.loads(v) if k in arrays else v for k, v in params.items()}
    return [json.loads(v) if i in arrays else v for i, v in enumerate(params)]


class PgCursor:
    """What a body gets back from `execute`: the rows, the count, and the identity inserted."""

    __slots__ = ("_cursor", "_raw")

    def __init__(self, raw: PgRaw, cursor: psycopg.Cursor[PgRow]) -> None:
        self._raw = raw
        self._cursor = cursor

    def fetchall(self) -> list[PgRow]:
        with mapped_errors():
            return self._cursor.fetchall() if self._cursor.description else []

    def fetchone(self) -> PgRow | None:
        with mapped_errors():
            return self._cursor.fetchone() if self._cursor.description else None

    def __iter__(self) -> Iterator[PgRow]:
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def lastrowid(self) -> int | None:
        """The identity the last INSERT drew (`lastval()`), read only when asked for."""
        return self._raw.last_identity()


class PgRaw:
    """The sqlite3-shaped face of one psycopg connection (autocommit; BEGIN is explicit)."""

    def __init__(self, conn: psycopg.Connection[PgRow]) -> None:
        self.pg = conn

    @classmethod
    def connect(cls, url: str, *, read_only: bool = False) -> PgRaw:
        with mapped_errors():
            conn = psycopg.connect(url, autocommit=True, row_factory=_row_factory)
            conn.adapters.register_dumper(bool, _BoolAsInt)
            conn.adapters.register_loader("numeric", _WholeNumeric)
            for json_type in ("json", "jsonb"):  # text, as SQLite returns it
                conn.adapters.register_loader(json_type, TextLoader)
            if read_only:
                conn.execute("SET default_transaction_read_only = on")
        return cls(conn)

    @property
    def in_transaction(self) -> bool:
        return self.pg.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, params: Params | None = None) -> PgCursor:
        query, arrays = translate(sql)
        values = _with_arrays(params if params is not None else (), arrays)
        with mapped_errors():
            cursor = self.pg.cursor()
            cursor.execute(query.encode(), values)
        return PgCursor(self, cursor)

    def executemany(self, sql: str, rows: Iterable[Params]) -> PgCursor:
        query, arrays = translate(sql)
        with mapped_errors():
            cursor = self.pg.cursor()
            cursor.executemany(query.encode(), (_with_arrays(r, arrays) for r in rows))
        return PgCursor(self, cursor)

    def execute_ddl(self, statement: str) -> None:
        """A schema statement, already in PostgreSQL's dialect, without parameters."""
        with mapped_errors():
            self.pg.execute(statement.encode())

    def last_identity(self) -> int | None:
        if not self.in_transaction:
            with mapped_errors():
                row = self.pg.execute(b"SELECT lastval()").fetchone()
            return None if row is None else int(row[0])
        # Inside a transaction a failing lastval() (no identity drawn yet) must not abort it.
        with mapped_errors():
            self.pg.execute(b"SAVEPOINT iris_lastval")
            try:
                row = self.pg.execute(b"SELECT lastval()").fetchone()
            except psycopg.Error:
                self.pg.execute(b"ROLLBACK TO SAVEPOINT iris_lastval")
                row = None
            self.pg.execute(b"RELEASE SAVEPOINT iris_lastval")
        return None if row is None else int(row[0])

    def close(self) -> None:
        self.pg.close()


class Worker:
    """One connection and the single thread every call on it runs on; reconnects with backoff
    when the connection broke."""

    def __init__(self, raw: PgRaw, name: str, url: str = "", *, read_only: bool = False) -> None:
        self.raw = raw
        self.name = name
        self._url = url
        self._read_only = read_only
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.generation = 1  # connections made so far
        self.attempts = 0  # reconnects tried (each one backoff step apart)
        self.problem: str | None = None  # why the connection is down, None while it works
        self._wait_s = 0.0
        self._next_try = 0.0  # `monotonic()` before which no reconnect is tried
        self.monotonic: Callable[[], float] = time.monotonic

    @classmethod
    async def open(cls, url: str, name: str, *, read_only: bool = False) -> Worker:
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        try:
            raw = await asyncio.get_running_loop().run_in_executor(
                thread, lambda: PgRaw.connect(url, read_only=read_only)
            )
        finally:
            thread.shutdown(wait=False)
        return cls(raw, name, url, read_only=read_only)

    async def call(self, fn: Callable[[PgRaw], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._run, fn)

    def _run(self, fn: Callable[[PgRaw], T]) -> T:
        """On the worker's thread: reconnect first if the connection broke, then `fn`. A read
        that finds its connection gone is run once more on a new one (it changed nothing); a
        write is not (its outcome is the caller's to judge)."""
        if self.raw.pg.broken or self.raw.pg.closed:
            self._reconnect()
        try:
            result = fn(self.raw)  # (a read batch returns its bodies' failures as outcomes)
        except sqlite3.Error:
            if not self._lost() or not self._read_only:
                raise
        else:
            if not self._lost() or not self._read_only:
                return result
        self._reconnect()
        return fn(self.raw)

    def _lost(self) -> bool:
        """Whether the connection broke (noted once, for `problem` and the log)."""
        if not self.raw.pg.broken:
            return False
        if self.problem is None:
            self.problem = "the connection to PostgreSQL was lost"
            log.warning("%s: the connection to PostgreSQL was lost", self.name)
        return True

    def _reconnect(self) -> None:
        now = self.monotonic()
        if now < self._next_try:
            raise sqlite3.OperationalError(
                f"{self.problem}; reconnecting in {self._next_try - now:.0f} s"
            )
        self.attempts += 1
        try:
            raw = PgRaw.connect(self._url, read_only=self._read_only)
        except sqlite3.Error as exc:
            first, most = BACKOFF_S
            self._wait_s = min(most, self._wait_s * 2) if self._wait_s else first
            self._next_try = self.monotonic() + self._wait_s
            self.problem = "PostgreSQL is unreachable (reconnecting with backoff)"
            raise sqlite3.OperationalError(f"{self.problem}: {exc}") from exc
        old, self.raw = self.raw, raw
        self.generation += 1
        self.problem, self._wait_s, self._next_try = None, 0.0, 0.0
        log.warning("%s: reconnected to PostgreSQL", self.name)
        with suppress(Exception):  # it is broken already; closing it is tidying up
            old.close()

    async def close(self) -> None:
        try:  # the connection as it is: closing never reconnects
            await asyncio.get_running_loop().run_in_executor(self._thread, self.raw.close)
        finally:
            self._thread.shutdown(wait=False)
