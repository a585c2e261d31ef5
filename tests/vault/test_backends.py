"""The vault's contract on both backends: batching, savepoints, transactions, rows, migrations."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable
from typing import Any

import psycopg
import pytest

from gateway.core.errors import VaultError
from tests.vault.conftest import MakeVault
from vault.audit import AuditLog, Outcome
from vault.db import Vault
from vault.inbound import InboundLog
from vault.migrations import MIGRATIONS, migrate
from vault.pg.migrate import MIGRATION_LOCK
from vault.pg.vault import PgVault


async def _set_version(vault: Vault, version: int) -> None:
    if vault.dialect == "sqlite":
        async with vault.transaction() as tx:
            await tx.execute(f"PRAGMA user_version = {version}")
    else:
        await vault.write("UPDATE iris_schema SET version = ?", (version,))


async def test_migrations_apply_once_and_reopen(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        assert await migrate(vault) == [m.name for m in MIGRATIONS]
        assert await vault.user_version() == len(MIGRATIONS)
    async with make_vault() as vault:
        assert await migrate(vault) == []
        assert await vault.user_version() == len(MIGRATIONS)


async def test_a_newer_schema_is_refused_naming_its_version(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        await _set_version(vault, len(MIGRATIONS) + 1)
    async with make_vault() as vault:
        with pytest.raises(VaultError, match=f"version {len(MIGRATIONS) + 1} is newer"):
            await migrate(vault)


async def test_a_failing_body_loses_only_its_own_statements(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)

        def insert(key: str, fail: bool) -> Awaitable[int]:
            def body(raw: sqlite3.Connection) -> int:
                raw.execute("INSERT INTO inbound_seen (key, seen_ms) VALUES (?, ?)", (key, 1))
                if fail:
                    raise ValueError("no")
                return 1

            return vault.run(body)

        results = await asyncio.gather(
            insert("a", False), insert("b", True), insert("c", False), return_exceptions=True
        )
        assert results[0] == 1 and results[2] == 1
        assert isinstance(results[1], ValueError)
        rows = await vault.fetchall("SELECT key FROM inbound_seen ORDER BY key")
        assert [r["key"] for r in rows] == ["a", "c"]


async def test_a_constraint_violation_is_a_vault_error_for_its_body_only(
    make_vault: MakeVault,
) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        sql = "INSERT INTO inbound_seen (key, seen_ms) VALUES (?, ?)"
        first, second = await asyncio.gather(
            vault.write(sql, ("k", 1)), vault.write(sql, ("k", 2)), return_exceptions=True
        )
        assert first == [] and isinstance(second, VaultError)
        assert await vault.scalar("SELECT seen_ms FROM inbound_seen WHERE key = ?", ("k",)) == 1


async def test_a_transaction_rolls_back_on_error_and_commits_otherwise(
    make_vault: MakeVault,
) -> None:
    async with make_vault() as vault:
        await migrate(vault)

        async def failing() -> None:
            async with vault.transaction() as tx:
                await tx.execute("INSERT INTO inbound_seen (key, seen_ms) VALUES ('x', 1)")
                raise RuntimeError("undo")

        with pytest.raises(RuntimeError):
            await failing()
        async with vault.transaction() as tx:
            await tx.execute("INSERT INTO inbound_seen (key, seen_ms) VALUES ('y', 2)")
            assert await tx.scalar("SELECT count(*) FROM inbound_seen") == 1
        assert [r[0] for r in await vault.fetchall("SELECT key FROM inbound_seen")] == ["y"]

        async def nested() -> None:
            async with vault.transaction():
                await vault.run(lambda raw: None)

        with pytest.raises(VaultError, match="nested"):
            await nested()


async def test_rows_read_by_name_and_position_with_sqlite_types(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        ids = [
            (await vault.write(
                """INSERT INTO llm_calls (at_ms, purpose, model, input_tokens, output_tokens,
                   latency_ms, ok) VALUES (?, 'chat', 'm', ?, 1, 5, ?) RETURNING id""",
                (2**40 + n, n, n % 2 == 0),
            ))[0][0]
            for n in range(3)
        ]  # fmt: skip
        assert ids == sorted(ids) and len(set(ids)) == 3
        row = await vault.fetchone(
            "SELECT sum(input_tokens) AS total, max(at_ms) AS last, sum(ok) AS ok FROM llm_calls"
        )
        assert row is not None
        assert dict(row) == {"total": 3, "last": 2**40 + 2, "ok": 2}
        assert (row[0], row["last"]) == (3, 2**40 + 2)
        assert type(row["total"]) is int


async def test_stores_dedupe_and_audit_on_both(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        log = InboundLog(vault)
        assert await log.first_sighting(["t:1", "t:2"], now_ms=5)
        assert not await log.first_sighting(["t:2", "t:3"], now_ms=6)
        assert await log.purge(older_than_ms=6) == 2
        audit = AuditLog(vault)
        entry = await audit.record(actor="a", via="chat", action="x", args={"n": 1},
                                   outcome=Outcome.OK, result="100% done", now_ms=7)  # fmt: skip
        [got] = await audit.recent()
        assert (got.id, got.args, got.result) == (entry, {"n": 1}, "100% done")


async def _waiting_for_lock(conn: psycopg.AsyncConnection[Any], count: int) -> None:
    """Until `count` sessions wait on an advisory lock. PostgreSQL has no notification of a
    session starting to wait; the server watches its own lock table (capped at 30 s)."""
    await conn.execute(b"SET statement_timeout = '30s'")
    await conn.execute(
        f"""DO $$ BEGIN
            WHILE (SELECT count(*) FROM pg_locks
                   WHERE locktype = 'advisory' AND NOT granted) < {count} LOOP
                PERFORM pg_sleep(0.005);
            END LOOP;
        END $$""".encode()
    )


async def test_two_migrators_at_once_one_waits_then_finds_nothing_left(pg_url: str) -> None:
    async with (
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other,
        PgVault(pg_url) as first,
        PgVault(pg_url) as second,
    ):
        await other.execute(b"SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        runs = [asyncio.create_task(migrate(first)), asyncio.create_task(migrate(second))]
        await _waiting_for_lock(other, 2)
        assert not any(run.done() for run in runs)
        tables = await (await other.execute(b"SELECT to_regclass('users')")).fetchall()
        assert tables == [(None,)]  # nobody migrated while the lock was held
        await other.execute(b"SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        done = sorted([await run for run in runs], key=len)
        assert done == [[], [m.name for m in MIGRATIONS]]
        assert await first.user_version() == await second.user_version() == len(MIGRATIONS)
