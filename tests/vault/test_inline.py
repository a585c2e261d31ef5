"""`InlineVault`: batched bodies run on the event loop's thread, with the same transaction
rules as `Vault`, and the cold paths (`transaction()`) still work on the same connections."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from vault.inline import InlineVault


async def test_bodies_run_on_the_loop_thread_and_keep_the_batch_rules(tmp_path: Path) -> None:
    async with InlineVault(tmp_path / "i.db") as vault:
        await vault.run(lambda raw: raw.execute("CREATE TABLE t (x INTEGER UNIQUE)"))
        threads: list[int] = []

        def insert(x: int) -> Callable[[sqlite3.Connection], int]:
            def body(raw: sqlite3.Connection) -> int:
                threads.append(threading.get_ident())
                raw.execute("INSERT INTO t VALUES (?)", (x,))
                return x

            return body

        # The duplicate fails alone (its own SAVEPOINT); the others commit together.
        results = await asyncio.gather(
            vault.run(insert(1)), vault.run(insert(1)), vault.run(insert(2)),
            return_exceptions=True,
        )  # fmt: skip
        assert results[0] == 1 and results[2] == 2
        assert isinstance(results[1], Exception)
        assert set(threads) == {threading.get_ident()}
        assert [r[0] for r in await vault.fetchall("SELECT x FROM t ORDER BY x")] == [1, 2]


async def test_transactions_still_work_beside_inline_writes(tmp_path: Path) -> None:
    async with InlineVault(tmp_path / "i.db") as vault:
        await vault.run(lambda raw: raw.execute("CREATE TABLE t (x INTEGER)"))
        async with vault.transaction() as tx:
            await tx.execute("INSERT INTO t VALUES (1)")
        await vault.run(lambda raw: raw.execute("INSERT INTO t VALUES (2)"))
        async with vault.transaction() as tx:
            assert await tx.scalar("SELECT count(*) FROM t") == 2
        assert await vault.scalar("SELECT sum(x) FROM t") == 3
