"""A real, throwaway PostgreSQL for the tests: one server per test session, a database per test.

The server comes from `pgserver` (PostgreSQL binaries in a wheel, part of the `postgres` extra
the test command installs) or, without it, from a system `initdb`/`pg_ctl` on PATH. When
neither can start one the run fails with the reason: the PostgreSQL tests are never skipped.
Each test gets a fresh database (`CREATE DATABASE`, a few milliseconds), dropped afterwards.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_numbers = itertools.count(1)


@dataclass(frozen=True)
class PgServer:
    admin_url: str  # the `postgres` maintenance database
    bin_dir: Path | None  # where its client tools (pg_dump) are

    def url(self, database: str) -> str:
        return self.admin_url.replace("/postgres?", f"/{database}?", 1)

    def create_database(self) -> str:
        import psycopg

        name = f"iris_test_{os.getpid()}_{next(_numbers)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}".encode())
        return name

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())


def _from_pgserver(root: Path) -> tuple[PgServer, object] | None:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        try:
            import pgserver
            from pgserver.postgres_server import get_server
        except ImportError:
            return None
        server = get_server(root, cleanup_mode="stop")
    bin_dir = Path(pgserver.__file__).parent / "pginstall" / "bin"
    return PgServer(server.get_uri(), bin_dir), server


def _from_system(root: Path) -> tuple[PgServer, object] | None:
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None or os.geteuid() == 0:
        return None  # (postgres refuses to run as root)
    data, sockets = root / "data", root / "sock"
    sockets.mkdir(parents=True)
    subprocess.run([initdb, "-D", str(data), "-U", "postgres", "--auth=trust"], check=True,
                   capture_output=True)  # fmt: skip
    options = f"-c listen_addresses='' -k {sockets}"
    subprocess.run([pg_ctl, "-D", str(data), "-o", options, "-w", "start", "-l",
                    str(root / "log")], check=True, capture_output=True)  # fmt: skip
    url = f"postgresql://postgres:@/postgres?host={sockets}"
    return PgServer(url, Path(pg_ctl).parent), (pg_ctl, data)


def _throwaway_settings(url: str) -> None:
    """Durability off: the data dies with the test run anyway, and fsync is most of the time
    a CREATE DATABASE or a migration takes."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off".encode())
        conn.execute(b"SELECT pg_reload_conf()")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    # Not under pytest's tmp_path: other pytest runs prune those directories, and as root
    # pgserver runs PostgreSQL as its own user, which must be able to reach the data directory.
    root = Path(tempfile.mkdtemp(prefix="iris-pg-"))
    root.chmod(0o755)
    try:
        yield from _serve(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _serve(root: Path) -> Iterator[PgServer]:
    errors: list[str] = []
    started: tuple[PgServer, object] | None = None
    for start in (_from_pgserver, _from_system):
        try:
            started = start(root / start.__name__)
        except Exception as exc:
            errors.append(f"{start.__name__}: {exc!r}")
            continue
        if started is not None:
            break
    if started is None:
        pytest.fail(
            "no PostgreSQL could be started for the vault tests: install the test extras "
            "(pip install -e '.[test,semantic,postgres]', which brings pgserver) or put "
            f"initdb/pg_ctl on PATH. {'; '.join(errors)}",
            pytrace=False,
        )
    server, handle = started
    _throwaway_settings(server.admin_url)
    yield server
    if isinstance(handle, tuple):
        pg_ctl, data = handle
        subprocess.run([pg_ctl, "-D", str(data), "-m", "immediate", "stop"], check=False,
                       capture_output=True)  # fmt: skip
    else:
        handle.cleanup()  # type: ignore[attr-defined]


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's server."""
    name = pg_server.create_database()
    try:
        yield pg_server.url(name)
    finally:
        pg_server.drop_database(name)
