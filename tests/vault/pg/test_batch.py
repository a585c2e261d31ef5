"""The writer's batches on PostgreSQL (`vault/pg/batch.py`): each body of a batch stays atomic
on its own, a failing body loses only its own statements, a failed commit fails the batch and
leaves the writer usable — and the savepoint statements share round trips (counted on the
connection's own libpq trace)."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.core.errors import VaultError
from tests.vault.test_batch import insert
from vault.batch import Outcome, SyncBody
from vault.pg.batch import write_batch
from vault.pg.connection import PgRaw
from vault.pg.vault import PgVault


@pytest.fixture
async def vault(pg_url: str) -> AsyncIterator[PgVault]:
    """A vault with one table `t (x UNIQUE, checked at commit)`, closed after the test."""
    async with PgVault(pg_url) as opened:
        await opened.run(
            lambda raw: raw.execute(
                "CREATE TABLE t (x INTEGER, UNIQUE (x) DEFERRABLE INITIALLY DEFERRED)"
            )
        )
        yield opened


async def batch(vault: PgVault, bodies: list[SyncBody[Any]]) -> list[Outcome]:
    return await vault.on_writer(lambda raw: write_batch(raw, bodies))  # type: ignore[arg-type]


async def values(vault: PgVault) -> list[int]:
    return [r[0] for r in await vault.fetchall("SELECT x FROM t ORDER BY x")]


@pytest.mark.parametrize("failing", [0, 1, 2])
async def test_a_failing_body_loses_only_its_own_statements(vault: PgVault, failing: int) -> None:
    outcomes = await batch(vault, [insert(x, fail=x == failing) for x in range(3)])
    assert [ok for ok, _ in outcomes] == [x != failing for x in range(3)]
    assert isinstance(outcomes[failing][1], ValueError)
    assert await values(vault) == [x for x in range(3) if x != failing]


async def test_a_database_error_fails_its_body_alone_as_a_vault_error(vault: PgVault) -> None:
    def bad(raw: sqlite3.Connection) -> None:
        raw.execute("INSERT INTO nowhere VALUES (1)")

    outcomes = await batch(vault, [insert(1), bad, insert(2)])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert isinstance(outcomes[1][1], VaultError)
    assert await values(vault) == [1, 2]


async def test_a_lone_failing_body_keeps_nothing(vault: PgVault) -> None:
    outcomes = await batch(vault, [insert(1, fail=True)])
    assert not outcomes[0][0]
    assert await values(vault) == []
    assert await vault.run(insert(2)) == 2
    assert await values(vault) == [2]


async def test_a_failed_commit_fails_the_batch_and_the_writer_stays_usable(
    vault: PgVault,
) -> None:
    with pytest.raises(sqlite3.IntegrityError):  # the deferred UNIQUE, checked at COMMIT
        await batch(vault, [insert(1), insert(1)])
    assert await values(vault) == []
    assert [ok for ok, _ in await batch(vault, [insert(3), insert(4)])] == [True, True]
    assert await values(vault) == [3, 4]


def round_trips(raw: PgRaw, run: Callable[[], object]) -> int:
    """Messages that make the client wait for the server (a simple Query, or the Sync that
    ends an extended-protocol statement), from libpq's trace of the connection."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace"
        with trace.open("w") as out:
            raw.pg.pgconn.trace(out.fileno())
            try:
                run()
            finally:
                raw.pg.pgconn.untrace()
        lines = trace.read_text().splitlines()
    return sum(1 for line in lines if "\tF\t" in line and ("\tQuery\t" in line or "Sync" in line))


async def test_savepoints_ride_along_one_round_trip_per_body_plus_one(vault: PgVault) -> None:
    def measured(raw: PgRaw) -> tuple[int, int]:
        # psycopg prepares a statement on its 5th run (a round trip of its own): past that.
        write_batch(raw, [insert(x) for x in range(100, 106)])  # type: ignore[arg-type]
        alone = round_trips(raw, lambda: write_batch(raw, [insert(1)]))  # type: ignore[arg-type]
        bodies = [insert(x) for x in range(10, 15)]
        return alone, round_trips(raw, lambda: write_batch(raw, bodies))  # type: ignore[arg-type]

    alone, five = await vault.on_writer(measured)
    assert alone == 1 + 1 + 1  # BEGIN, the INSERT, COMMIT
    assert five == 5 + 5 + 1  # each INSERT, each savepoint change, the COMMIT with the last
    assert await values(vault) == [1, *range(10, 15), *range(100, 106)]
