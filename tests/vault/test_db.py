from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from gateway.core.errors import VaultError
from vault.db import Vault
from vault.migrations import MIGRATIONS, migrate
from vault.schema import Migration


async def test_migrates_from_empty_and_rerun_is_a_noop(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        applied = await migrate(vault)
        assert applied == [m.name for m in MIGRATIONS]
        assert await vault.user_version() == len(MIGRATIONS)
        assert await migrate(vault) == []
        tables = {r[0] for r in await vault.fetchall("SELECT name FROM sqlite_master")}
    assert {
        "users",
        "chats",
        "sessions",
        "messages",
        "memories",
        "memories_fts",
        "inbound_seen",
        "outbox",
    } <= tables


async def test_failed_migration_leaves_previous_version(tmp_path: Path) -> None:
    broken = (*MIGRATIONS, Migration("broken", ("CREATE TABLE ok_table (x)", "NOT SQL")))
    async with Vault(tmp_path / "v.db") as vault:
        with pytest.raises(VaultError):
            await migrate(vault, broken)
        assert await vault.user_version() == len(MIGRATIONS)
        assert await vault.fetchone("SELECT 1 FROM sqlite_master WHERE name='ok_table'") is None


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        async with vault.transaction() as tx:
            await tx.execute("PRAGMA user_version = 99")
        with pytest.raises(VaultError, match="newer than this Iris"):
            await migrate(vault)


async def test_pragmas(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        async with vault.writer() as tx:
            assert await tx.scalar("PRAGMA journal_mode") == "wal"
            assert await tx.scalar("PRAGMA foreign_keys") == 1
            assert await tx.scalar("PRAGMA busy_timeout") == 5000
        assert await vault.scalar("PRAGMA query_only") == 1  # reads use the read-only side
        with pytest.raises(VaultError):
            await vault.fetchall("CREATE TABLE nope (x)")


async def test_rollback_of_one_coroutine_never_loses_anothers_write(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        async with vault.transaction() as tx:
            await tx.execute("CREATE TABLE t (v INTEGER)")
        inside = asyncio.Event()

        async def failing() -> None:
            async with vault.transaction() as tx:
                await tx.execute("INSERT INTO t VALUES (1)")
                inside.set()
                await asyncio.sleep(0)  # let the other coroutine try to interleave
                raise RuntimeError("boom")

        async def writer(value: int) -> None:
            await inside.wait()
            async with vault.transaction() as tx:
                await tx.execute("INSERT INTO t VALUES (?)", (value,))

        results = await asyncio.gather(
            failing(), *(writer(v) for v in range(2, 12)), return_exceptions=True
        )
        assert isinstance(results[0], RuntimeError)
        assert all(r is None for r in results[1:])
        values = sorted(r[0] for r in await vault.fetchall("SELECT v FROM t"))
    assert values == list(range(2, 12))


async def test_nested_transaction_raises(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault, vault.transaction():
        with pytest.raises(VaultError, match="nested"):
            async with vault.transaction():
                pass


async def test_backup_is_a_consistent_copy(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        async with vault.transaction() as tx:
            await tx.execute("CREATE TABLE t (v INTEGER)")
            await tx.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
        await vault.backup(tmp_path / "copy.db")
        with pytest.raises(VaultError, match="already exists"):
            await vault.backup(tmp_path / "copy.db")
    copy = sqlite3.connect(tmp_path / "copy.db")
    try:
        assert copy.execute("SELECT count(*) FROM t").fetchone() == (100,)
        assert copy.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
    finally:
        copy.close()


async def test_due_outbox_query_uses_the_partial_index(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        plan = await vault.fetchall(
            "EXPLAIN QUERY PLAN SELECT id FROM outbox WHERE status = 'pending' "
            "AND next_attempt_ms <= ? ORDER BY next_attempt_ms LIMIT 10",
            (0,),
        )
    assert any("outbox_due" in row[3] for row in plan)


async def test_unusable_path_is_a_vault_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(VaultError):
        async with Vault(blocker / "v.db"):
            pass


async def test_cancelled_while_beginning_leaves_no_open_transaction(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        entered = asyncio.Event()

        async def use() -> None:
            async with vault.transaction() as tx:
                entered.set()
                await tx.fetchall("SELECT 1")

        task = asyncio.create_task(use())
        await asyncio.sleep(0)  # the task has queued its BEGIN and waits for it
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
        assert not entered.is_set()
        async with vault.transaction() as tx:  # the writer is usable again
            await tx.execute("CREATE TABLE after_cancel (x)")
        assert await vault.scalar("SELECT count(*) FROM after_cancel") == 0


async def test_checkpoints_run_off_the_writer_until_cancelled(tmp_path: Path) -> None:
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        async with vault.transaction() as tx:
            await tx.execute("CREATE TABLE t (v INTEGER)")
            await tx.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(500)])

        def rows_in_main_file() -> int:
            # immutable=1 reads the database file alone, ignoring the WAL.
            raw = sqlite3.connect(f"file:{tmp_path / 'v.db'}?immutable=1", uri=True)
            try:
                return int(raw.execute("SELECT count(*) FROM t").fetchone()[0])
            except sqlite3.OperationalError:  # the table itself is still only in the WAL
                return 0
            finally:
                raw.close()

        assert rows_in_main_file() == 0
        sleeps: list[float] = []

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            if len(sleeps) == 3:
                raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):
            await vault.run_checkpoints(sleep, interval_s=0.5)
        # (without the checkpoints the rows would still be in the WAL only)
        assert sleeps == [0.5, 0.5, 0.5]
        assert rows_in_main_file() == 500
