"""The store contract runs on both backends: `make_vault()` opens SQLite or PostgreSQL.

A test that takes `make_vault` runs twice, once per backend; every call opens a new `Vault` on
the same storage (the same file, the same database), so reopening is tested the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vault.backend import vault_for
from vault.db import Vault

MakeVault = Callable[[], Vault]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_vault(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> MakeVault:
    url = str(request.getfixturevalue("pg_url")) if backend == "postgresql" else ""
    return lambda: vault_for(tmp_path / "v.db", url)
