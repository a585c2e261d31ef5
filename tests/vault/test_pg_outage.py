"""PostgreSQL going away mid-run: calls fail as `VaultError` (never hang, never loop), the
vault says why (`problem`, shown by /healthz), reconnects are tried one backoff step apart,
and once the server takes connections again the next call reconnects and works."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from gateway.core.errors import VaultError
from tests.fakes.postgres import PgServer
from vault.migrations import migrate
from vault.pg.connection import Worker
from vault.pg.vault import PgVault


@contextmanager
def outage(server: PgServer, url: str) -> Iterator[None]:
    """The database refuses new connections and every session on it is terminated, until the
    block ends (what a restart or failover looks like to the vault)."""
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false".encode())
        admin.execute(
            b"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (name,),
        )
        try:
            yield
        finally:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true".encode())


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_lost_server_fails_calls_fast_then_reconnects_with_backoff(
    pg_server: PgServer, pg_url: str
) -> None:
    async with PgVault(pg_url) as vault:
        await migrate(vault)
        workers: list[Worker] = [vault._pg_writer, vault._pg_reader]  # type: ignore[list-item]
        time = Monotonic()
        for worker in workers:
            worker.monotonic = time
        sql = "INSERT INTO inbound_seen (key, seen_ms) VALUES (?, ?)"
        await vault.write(sql, ("before", 1))
        assert vault.problem() is None
        with outage(pg_server, pg_url):
            with pytest.raises(VaultError):  # the write that finds the connection gone
                await vault.write(sql, ("during", 2))
            with pytest.raises(VaultError):
                await vault.fetchall("SELECT key FROM inbound_seen")
            assert vault.problem() is not None
            for _ in range(5):  # one reconnect tried; the calls after it fail at once
                with pytest.raises(VaultError):
                    await vault.write(sql, ("during", 3))
            assert [w.attempts for w in workers] == [1, 1]  # (a read retries at once)
            time.now += 1.0  # the first backoff step: one more attempt, then 2 s
            for _ in range(3):
                with pytest.raises(VaultError):
                    await vault.write(sql, ("during", 4))
            assert workers[0].attempts == 2
        assert vault.problem() is not None  # until a call finds the server back
        time.now += 2.0
        await vault.write(sql, ("after", 5))
        rows = await vault.fetchall("SELECT key FROM inbound_seen ORDER BY key")
        assert [r[0] for r in rows] == ["after", "before"]  # nothing from the outage
        assert vault.problem() is None


async def test_a_transaction_cut_by_a_reconnect_commits_nothing(
    pg_server: PgServer, pg_url: str
) -> None:
    async with PgVault(pg_url) as vault:
        await migrate(vault)

        async def cut() -> None:
            async with vault.transaction() as tx:
                await tx.execute("INSERT INTO inbound_seen (key, seen_ms) VALUES ('a', 1)")
                with outage(pg_server, pg_url):
                    pass  # the session is gone; the server takes connections again
                # A body that swallows the failure must still not commit half of itself.
                with contextlib.suppress(sqlite3.Error):  # (as the statement raises it)
                    await tx.execute("INSERT INTO inbound_seen (key, seen_ms) VALUES ('b', 2)")
                await tx.execute("INSERT INTO inbound_seen (key, seen_ms) VALUES ('c', 3)")

        with pytest.raises(VaultError, match="lost mid-transaction"):
            await cut()
        # The reader's session went too: its first read reconnects and is run again.
        assert await vault.fetchall("SELECT key FROM inbound_seen") == []
