"""Restoring a backup: check it, keep the file it replaces, and swap it in atomically.

The backup must pass `PRAGMA integrity_check`, look like an Iris vault (it has the core
tables) and have a schema no newer than this Iris; Iris migrates an older one at its next
start. The current vault is checkpointed (its WAL folded into the main file) and renamed to
`<name>.replaced-<UTC time>`, never deleted; its `-wal`/`-shm` files are removed so they cannot
be applied to the restored file. The backup is copied with SQLite's backup API into a
temporary file next to the vault, checked again, then renamed into place.

Synchronous on purpose: it runs from the command line while nothing else uses the vault (the
caller holds `vault.lock.exclusive`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from gateway.core.errors import VaultError
from vault.migrations import MIGRATIONS

CORE_TABLES = ("users", "chats", "sessions", "messages")


def _open_read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _side_files(path: Path) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]


def check(path: Path) -> int:
    """The backup's schema version, once it is known to be a sound Iris vault. Reading a file
    in WAL mode makes SQLite create its `-wal`/`-shm` beside it: those it made are removed
    (empty: nothing was written), any that were there are left alone."""
    if not path.is_file():
        raise VaultError(f"no such file: {path}")
    made = [f for f in _side_files(path) if not f.exists()]
    try:
        return _check(path)
    finally:
        for side in made:
            side.unlink(missing_ok=True)


def _check(path: Path) -> int:
    try:
        conn = _open_read_only(path)
        try:
            verdict = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
            tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise VaultError(f"{path} is not a readable SQLite database: {exc}") from exc
    if verdict != ["ok"]:
        raise VaultError(f"{path} fails the integrity check: {verdict[0]}")
    missing = [t for t in CORE_TABLES if t not in tables]
    if missing:
        raise VaultError(f"{path} is not an Iris vault (no {', '.join(missing)} table)")
    if version > len(MIGRATIONS):
        raise VaultError(
            f"{path} has schema version {version}, newer than this Iris ({len(MIGRATIONS)})"
        )
    return version


def _set_aside(target: Path, now: datetime) -> Path | None:
    if not target.exists():
        return None
    conn = sqlite3.connect(target)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.DatabaseError as exc:
        raise VaultError(f"cannot checkpoint {target} before replacing it: {exc}") from exc
    finally:
        conn.close()
    kept = target.with_name(f"{target.name}.replaced-{now.strftime('%Y%m%dT%H%M%SZ')}")
    os.replace(target, kept)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            target.with_name(target.name + suffix).unlink()
    return kept


def restore(backup: Path, target: Path, now: datetime | None = None) -> Path | None:
    """Replace `target` with `backup`; return where the replaced file was kept (None: none)."""
    check(backup)
    staging = target.with_name(target.name + ".restoring")
    staging.unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    made = [f for f in _side_files(backup) if not f.exists()]
    source = _open_read_only(backup)
    try:
        dest = sqlite3.connect(staging)
        try:
            source.backup(dest)
        finally:
            dest.close()
    except sqlite3.DatabaseError as exc:
        staging.unlink(missing_ok=True)
        raise VaultError(f"cannot copy {backup}: {exc}") from exc
    finally:
        source.close()
        for side in made:
            side.unlink(missing_ok=True)
    check(staging)
    for side in _side_files(staging):  # never carried over to the vault's name
        side.unlink(missing_ok=True)
    kept = _set_aside(target, now or datetime.now(UTC))
    os.replace(staging, target)
    return kept
