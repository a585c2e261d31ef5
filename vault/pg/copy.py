"""`iris db copy`: move a SQLite vault into PostgreSQL, idempotently, and count what is there.

Both sides are migrated to this Iris's schema first, so their tables and columns match (the
PostgreSQL-only generated search columns are not copied: they compute themselves). Tables are
copied in the order SQLite created them, which is an order their foreign keys allow, in chunks
of `CHUNK` rows, each chunk one transaction; every row goes in with `ON CONFLICT DO NOTHING`, so
running the copy again (after an interruption, or to check) adds only what is missing and never
doubles a row. Afterwards each identity sequence is moved past the highest copied id, so new
rows never collide with copied ones. The result is the row count of every table on both sides.

That only holds while the target has nothing but rows of this source: a database where Iris
already ran has its own users and chats under the same ids, and a copy would file one user's
messages under another's chat. So before anything is written, every user and chat of the target
must be the source's row of the same id (an empty target, or one an earlier run of this same
copy filled); otherwise `CopyConflict` says which row differs and nothing is copied.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vault.db import Vault
from vault.migrations import migrate
from vault.pg.connection import PgRaw, mapped_errors
from vault.pg.vault import PgVault

CHUNK = 2000
# Tables whose rows other rows point at by id, with the columns that say whose a row is.
_IDENTITIES = {"users": ("channel", "user_id"), "chats": ("channel", "chat_id", "thread_id")}


class CopyConflict(Exception):
    """The target holds rows that are not this source's: copying would mix them."""


@dataclass(frozen=True, slots=True)
class TableCount:
    table: str
    source: int
    target: int

    @property
    def matches(self) -> bool:
        return self.source == self.target


def _tables(raw: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    """The plain tables in creation order, each with its columns (FTS5 tables left out)."""
    rows = raw.execute(
        """SELECT name, sql FROM sqlite_master WHERE type = 'table'
           AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"""
    ).fetchall()
    virtual = {str(r[0]) for r in rows if str(r[1]).upper().startswith("CREATE VIRTUAL")}
    tables = []
    for name, _ in rows:
        if name in virtual or any(name.startswith(f"{v}_") for v in virtual):
            continue  # an FTS5 table and its shadow tables
        columns = [str(c[1]) for c in raw.execute(f'PRAGMA table_info("{name}")').fetchall()]
        tables.append((str(name), columns))
    return tables


def _quoted(columns: Sequence[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def _chunk(table: str, columns: Sequence[str], offset: int) -> Any:
    def body(raw: sqlite3.Connection) -> list[tuple[Any, ...]]:
        rows = raw.execute(
            f'SELECT {_quoted(columns)} FROM "{table}" ORDER BY rowid LIMIT ? OFFSET ?'
            if _has_rowid(raw, table)
            else f'SELECT {_quoted(columns)} FROM "{table}" ORDER BY 1 LIMIT ? OFFSET ?',
            (CHUNK, offset),
        ).fetchall()
        return [tuple(r) for r in rows]

    return body


def _has_rowid(raw: sqlite3.Connection, table: str) -> bool:
    row = raw.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    return row is not None and "WITHOUT ROWID" not in str(row[0]).upper()


def _insert(table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> Any:
    marks = ", ".join("%s" for _ in columns)
    sql = f'INSERT INTO "{table}" ({_quoted(columns)}) VALUES ({marks}) ON CONFLICT DO NOTHING'

    def body(raw: PgRaw) -> None:
        with mapped_errors(), raw.pg.transaction():
            raw.pg.cursor().executemany(sql.encode(), rows)

    return body


def _advance_identities(identities: Sequence[tuple[str, str]]) -> Any:
    def body(raw: PgRaw) -> None:
        with mapped_errors():
            for table, column in identities:
                raw.pg.execute(
                    f"""SELECT setval(pg_get_serial_sequence(%s, %s),
                        coalesce(max("{column}"), 0) + 1, false) FROM "{table}" """.encode(),
                    (table, column),
                )

    return body


def _identities(raw: PgRaw) -> list[tuple[str, str]]:
    """(table, column) of every identity column (`id` keys, and `rowid` of the other tables)."""
    with mapped_errors():
        rows = raw.pg.execute(
            b"""SELECT table_name, column_name FROM information_schema.columns
                WHERE table_schema = current_schema() AND is_identity = 'YES'"""
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


async def _check_target(source: Vault, target: PgVault) -> None:
    for table, key in _IDENTITIES.items():
        columns = ", ".join(("id", *key))
        theirs = await target.fetchall(f"SELECT {columns} FROM {table} ORDER BY id")
        if not theirs:
            continue
        ours = {
            int(r[0]): tuple(r[1:]) for r in await source.fetchall(f"SELECT {columns} FROM {table}")
        }
        for row in theirs:
            if ours.get(int(row[0])) != tuple(row[1:]):
                raise CopyConflict(
                    f"the PostgreSQL vault already holds other data ({table} #{row[0]}, "
                    f"{':'.join(str(v) for v in row[1:] if v)}, is not the SQLite vault's): "
                    "copy into an empty database"
                )


async def copy_vault(source: Vault, target: PgVault) -> list[TableCount]:
    """Copy every row of `source` (SQLite) that `target` (PostgreSQL) lacks; count both."""
    await migrate(source)
    await migrate(target)
    await _check_target(source, target)
    tables = await source.read(_tables)
    for table, columns in tables:
        offset = 0
        while rows := await source.read(_chunk(table, columns, offset)):
            await target.on_writer(_insert(table, columns, rows))
            offset += len(rows)
    await target.on_writer(_advance_identities(await target.on_writer(_identities)))
    counts = []
    for table, _ in tables:
        here = int(await source.scalar(f'SELECT count(*) FROM "{table}"'))
        there = int(await target.scalar(f'SELECT count(*) FROM "{table}"'))
        counts.append(TableCount(table, here, there))
    return counts
