"""Batched writes and reads (`vault/batch.py`): each body stays atomic on its own, its caller
resumes only once it is committed, and a failure or a cancellation touches only its own body."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.core.errors import VaultError
from vault.batch import Batcher, Outcome, SyncBody, write_batch
from vault.db import Vault


def insert(x: int, fail: bool = False) -> Callable[[sqlite3.Connection], int]:
    def body(raw: sqlite3.Connection) -> int:
        raw.execute("INSERT INTO t VALUES (?)", (x,))
        if fail:
            raise ValueError("body failed")
        return x

    return body


async def values(vault: Vault) -> list[int]:
    return [r[0] for r in await vault.fetchall("SELECT x FROM t ORDER BY x")]


async def table(tmp_path: Path) -> Vault:
    vault = Vault(tmp_path / "b.db")
    await vault.open()
    await vault.run(lambda raw: raw.execute("CREATE TABLE t (x INTEGER UNIQUE)"))
    return vault


@pytest.fixture
async def vault(tmp_path: Path) -> AsyncIterator[Vault]:
    """A vault with one table `t (x INTEGER UNIQUE)`, closed after the test."""
    opened = await table(tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_failing_body_loses_only_its_own_statements(vault: Vault) -> None:
    results = await asyncio.gather(
        vault.run(insert(1)), vault.run(insert(2, fail=True)), vault.run(insert(3)),
        return_exceptions=True,
    )  # fmt: skip
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], ValueError)
    assert await values(vault) == [1, 3]


async def test_a_sqlite_error_in_a_body_is_a_vault_error_for_that_caller_only(vault: Vault) -> None:
    await vault.run(insert(1))
    results = await asyncio.gather(
        vault.run(insert(2)), vault.run(insert(1)), vault.run(insert(3)),  # 1: UNIQUE
        return_exceptions=True,
    )  # fmt: skip
    assert results[0] == 2 and results[2] == 3
    assert isinstance(results[1], VaultError)
    assert await values(vault) == [1, 2, 3]


async def test_every_caller_resumes_only_after_its_write_is_committed(
    vault: Vault, tmp_path: Path
) -> None:
    async def write_then_look(x: int) -> bool:
        await vault.run(insert(x))
        # Another connection, as another process would see it: only committed rows.
        with sqlite3.connect(tmp_path / "b.db") as other:
            return other.execute("SELECT 1 FROM t WHERE x = ?", (x,)).fetchone() is not None

    assert all(await asyncio.gather(*(write_then_look(x) for x in range(50))))


async def test_bodies_run_in_submission_order(vault: Vault) -> None:
    seen: list[int] = []

    def body(x: int) -> Callable[[sqlite3.Connection], None]:
        def run(raw: sqlite3.Connection) -> None:
            seen.append(x)
            raw.execute("INSERT INTO t VALUES (?)", (x,))

        return run

    await asyncio.gather(*(vault.run(body(x)) for x in range(20)))
    assert seen == list(range(20))


async def test_a_failed_commit_fails_its_batch_and_the_writer_stays_usable(vault: Vault) -> None:
    await vault.run(lambda raw: raw.execute("CREATE TABLE child (p INTEGER REFERENCES t(x))"))

    def dangling(raw: sqlite3.Connection) -> None:  # only checked at COMMIT
        raw.execute("PRAGMA defer_foreign_keys = ON")
        raw.execute("INSERT INTO child VALUES (99)")

    results = await asyncio.gather(
        vault.run(insert(1)), vault.run(dangling), return_exceptions=True
    )
    assert all(isinstance(r, VaultError) for r in results)
    assert await values(vault) == []
    assert await vault.run(insert(2)) == 2
    assert await values(vault) == [2]


async def test_a_cancelled_caller_not_yet_in_a_batch_writes_nothing(vault: Vault) -> None:
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold_writer() -> None:  # the first batch can't start until released
        async with vault.writer():
            holding.set()
            await release.wait()

    holder = asyncio.create_task(hold_writer())
    await holding.wait()
    first = asyncio.create_task(vault.run(insert(1)))
    await asyncio.sleep(0)
    queued = asyncio.create_task(vault.run(insert(2)))
    await asyncio.sleep(0)
    queued.cancel()
    await asyncio.wait([queued])
    release.set()
    await holder
    await first
    assert await values(vault) == [1]


async def test_close_waits_for_queued_writes(tmp_path: Path) -> None:
    vault = await table(tmp_path)
    writes = [asyncio.create_task(vault.run(insert(x))) for x in range(10)]
    await asyncio.sleep(0)
    await vault.close()
    assert [w.result() for w in writes] == list(range(10))
    with sqlite3.connect(tmp_path / "b.db") as other:
        assert other.execute("SELECT count(*) FROM t").fetchone()[0] == 10


async def test_a_write_inside_a_transaction_of_the_same_task_raises(vault: Vault) -> None:
    async with vault.transaction():
        with pytest.raises(VaultError, match="nested"):
            await vault.run(insert(1))


async def test_reads_of_one_batch_fail_alone(vault: Vault) -> None:
    await vault.run(insert(7))
    results = await asyncio.gather(
        vault.fetchall("SELECT x FROM t"),
        vault.fetchall("SELECT nope FROM t"),
        vault.read(lambda raw: raw.execute("SELECT count(*) FROM t").fetchone()[0]),
        return_exceptions=True,
    )
    assert [r[0] for r in results[0]] == [7]  # type: ignore[union-attr]
    assert isinstance(results[1], VaultError)
    assert results[2] == 1


async def test_a_write_behind_commits_before_later_writes_and_its_failure_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vault = await table(tmp_path)
    try:
        vault.run_soon(insert(1), "first")
        vault.run_soon(insert(1), "the duplicate")  # UNIQUE: fails, nobody waits for it
        order = await vault.run(lambda raw: [r[0] for r in raw.execute("SELECT x FROM t")])
        assert order == [1]
        vault.run_soon(insert(2), "at close")
    finally:
        await vault.close()
    assert "could not save the duplicate" in caplog.text
    with sqlite3.connect(tmp_path / "b.db") as other:
        assert other.execute("SELECT count(*) FROM t").fetchone()[0] == 2


async def test_a_batch_interrupted_by_shutdown_is_never_reported_as_failed(
    vault: Vault,
) -> None:
    write = asyncio.create_task(vault.run(insert(1)))
    await asyncio.sleep(0)  # the write's batch is on its way
    flusher = next(t for t in asyncio.all_tasks() if t.get_name() == "vault-writes")
    later = asyncio.create_task(vault.run(insert(2)))
    await asyncio.sleep(0)
    flusher.cancel()  # what the loop's shutdown does to leftover tasks
    with pytest.raises(VaultError, match="outcome unknown"):
        await write  # it may have committed: the caller is not told it failed
    with pytest.raises(VaultError, match="before it ran"):
        await later
    assert await vault.run(insert(3)) == 3  # a new batch starts as usual
    assert 2 not in await values(vault)


async def test_a_flusher_cancelled_before_it_started_fails_its_callers_and_recovers(
    vault: Vault,
) -> None:
    write = asyncio.create_task(vault.run(insert(1)))
    await asyncio.sleep(0)  # queued; its flusher is created but has not run yet
    flusher = next(t for t in asyncio.all_tasks() if t.get_name() == "vault-writes")
    flusher.cancel()
    with pytest.raises(VaultError, match="before it ran"):
        await write
    assert await vault.run(insert(2)) == 2
    assert await values(vault) == [2]


async def test_an_async_transaction_waits_for_writes_queued_before_it(vault: Vault) -> None:
    vault.run_soon(insert(1), "queued first")
    async with vault.transaction() as tx:
        seen = await tx.fetchall("SELECT x FROM t")
        await tx.execute("INSERT INTO t VALUES (2)")
    assert [r[0] for r in seen] == [1]


async def test_a_body_raising_stop_iteration_fails_alone(vault: Vault) -> None:
    def exhausted(raw: sqlite3.Connection) -> int:
        return int(next(iter(())))

    results = await asyncio.gather(
        vault.run(insert(1)), vault.run(exhausted), vault.run(insert(3)),
        return_exceptions=True,
    )  # fmt: skip
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], VaultError)


async def test_a_body_that_rolls_back_the_transaction_fails_the_whole_batch(vault: Vault) -> None:
    await vault.run(insert(1))

    def rollback(raw: sqlite3.Connection) -> None:
        raw.execute("INSERT OR ROLLBACK INTO t VALUES (1)")  # UNIQUE: ends the transaction

    results = await asyncio.gather(
        vault.run(insert(2)), vault.run(rollback), return_exceptions=True
    )
    assert all(isinstance(r, VaultError) for r in results)  # 2 was lost with it
    assert await values(vault) == [1]
    assert await vault.run(insert(4)) == 4


class Odd(BaseException):
    """Not an Exception: what a careless body might raise."""


@pytest.mark.parametrize("odd", [Odd("odd"), asyncio.CancelledError()])
async def test_a_body_raising_a_base_exception_fails_alone(
    vault: Vault, odd: BaseException
) -> None:
    def body(raw: sqlite3.Connection) -> None:
        raw.execute("INSERT INTO t VALUES (5)")
        raise odd

    results = await asyncio.gather(
        vault.run(insert(1)), vault.run(body), vault.run(insert(3)), return_exceptions=True
    )
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], VaultError)  # never a cancellation of the caller
    assert await values(vault) == [1, 3]
    assert await vault.run(insert(4)) == 4  # the batcher goes on


async def test_write_behind_work_joins_the_next_batch_instead_of_starting_one(
    vault: Vault,
) -> None:
    statements: list[str] = []
    await vault.run(lambda raw: raw.set_trace_callback(statements.append))
    statements.clear()  # that body's own COMMIT
    vault.run_soon(insert(1), "first")
    vault.run_soon(insert(2), "second")
    assert await vault.run(insert(3)) == 3
    assert statements.count("BEGIN IMMEDIATE") == statements.count("COMMIT") == 1
    vault.run_soon(insert(4), "at idle")
    await vault.idle()  # does not wait for the timer: it commits now
    assert statements.count("COMMIT") == 2
    assert await values(vault) == [1, 2, 3, 4]


async def test_lone_write_behind_work_still_commits_by_itself() -> None:
    raw = sqlite3.connect(":memory:", isolation_level=None)
    raw.execute("CREATE TABLE t (x INTEGER UNIQUE)")
    hops: list[int] = []

    async def hop(fn: SyncBody[list[Outcome]]) -> list[Outcome]:
        hops.append(1)
        return fn(raw)

    batcher = Batcher(hop, write_batch, what="write")
    assert await batcher.queue(insert(7), lazy=True) == 7  # after `LAZY_S`, no other write
    assert hops == [1]
    assert raw.execute("SELECT x FROM t").fetchall() == [(7,)]
