"""The run lock beside a SQLite vault: shared between runs, exclusive for a restore, and
nothing at all on PostgreSQL, where several replicas share the database on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.errors import VaultError
from vault.lock import exclusive, in_use, lock_path, one_run

URL = "postgresql://iris@db.example/iris"


def test_runs_share_the_lock_and_a_restore_waits_for_them(tmp_path: Path) -> None:
    vault = tmp_path / "iris.db"
    with (
        in_use(vault),
        in_use(vault),
        pytest.raises(VaultError, match="stop it first"),
        exclusive(vault),
    ):
        pass
    with exclusive(vault), pytest.raises(VaultError, match="being restored"), in_use(vault):
        pass


def test_on_postgresql_runs_take_no_file_lock(tmp_path: Path) -> None:
    vault = tmp_path / "unused" / "iris.db"
    with in_use(vault, URL), in_use(vault, URL):
        assert not lock_path(vault).exists()
    with exclusive(tmp_path / "other.db"), in_use(tmp_path / "other.db", URL):
        pass  # a restore of some local file does not stop a replica


def test_one_run_per_sqlite_vault_and_any_number_on_postgresql(tmp_path: Path) -> None:
    vault = tmp_path / "iris.db"
    busy = "another iris run is using .*iris.db: one iris run per SQLite vault"
    with one_run(vault), pytest.raises(VaultError, match=busy), one_run(vault):
        pass
    with one_run(vault), one_run(tmp_path / "other.db"):
        pass  # another vault: another lock
    with one_run(vault, URL), one_run(vault, URL):
        pass  # replicas share a PostgreSQL vault by design
