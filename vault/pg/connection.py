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

Each `Worker` owns one connection and the one thread it is used on.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, TypeVar

import psycopg
from psycopg.adapt import Buffer, Dumper, Loader
from psycopg.pq import TransactionStatus
from psycopg.rows import RowMaker
from psycopg.types.string import TextLoader

from vault.pg.dialect import translate

T = TypeVar("T")
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
    """One connection and the single thread every call on it runs on."""

    def __init__(self, raw: PgRaw, name: str) -> None:
        self.raw = raw
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    @classmethod
    async def open(cls, url: str, name: str, *, read_only: bool = False) -> Worker:
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        try:
            raw = await asyncio.get_running_loop().run_in_executor(
                thread, lambda: PgRaw.connect(url, read_only=read_only)
            )
        finally:
            thread.shutdown(wait=False)
        return cls(raw, name)

    async def call(self, fn: Callable[[PgRaw], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, self.raw)

    async def close(self) -> None:
        try:
            await self.call(lambda raw: raw.close())
        finally:
            self._thread.shutdown(wait=False)
