"""Restoring a backup: check it, keep the file it replaces, and swap it in atomically.

The backup must pass `PRAGMA integrity_check`, look like an Iris vault (it has the core
tables) and have a schema no newer than this Iris; Iris migrates an older one at its next
start. The current vault is checkpointed (its WAL folded into the main file) and renamed to
`<name>.replaced-<UTC time>`, never deleted; its `-wal`/`-shm` files are removed so they cannot
be applied to the restored file. The backup is copied with SQLite's backup API into a
temporary file next to the vault, checked again, then renamed into place.

Work the backup still had to do is settled in the copy before it goes into place, unless
asked to keep it (`keep_pending`): replies waiting to be sent (outbox rows `pending` become
`uncertain`, and join their conversation's history as an uncertain send does), messages
confirmed to the platform but not yet answered (intake rows become `rejected`), and
follow-ups and check-ins due by now and not yet started (`skipped`). Any of them may have been
done after the backup was taken, and the backup cannot tell which: done again, a user would
get a reply twice. Sends that were under way (`sending` rows, `delivering` items) are left to
the start's crash recovery, which settles them the way it settles any interrupted send. What
was settled is counted (`Settled`), for the operator to hear.

Synchronous on purpose: it runs from the command line while nothing else uses the vault (the
caller holds `vault.lock.exclusive`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gateway.core.errors import VaultError
from vault.migrations import MIGRATIONS
from vault.outbox import record_history_in

CORE_TABLES = ("users", "chats", "sessions", "messages")
RESTORED = "restored from a backup: it may have been done after the backup was taken"


@dataclass(frozen=True, slots=True)
class Settled:
    """What a restore settled rather than do again (`keep_pending` off)."""

    replies: int = 0  # outbox rows waiting to be sent
    messages: int = 0  # inbound messages confirmed but not answered
    follow_ups: int = 0  # follow-ups and check-ins due by the time of the restore, not begun

    def __bool__(self) -> bool:
        return bool(self.replies or self.messages or self.follow_ups)


def _settle(path: Path, now_ms: int) -> Settled:
    """Settle the copy's unfinished work (see the module's docstring)."""
    conn = sqlite3.connect(path)
    try:
        tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}
        current = int(conn.execute("PRAGMA user_version").fetchone()[0]) == len(MIGRATIONS)
        with conn:
            replies = messages = follow_ups = 0
            if "outbox" in tables:
                rows = conn.execute("SELECT id FROM outbox WHERE status = 'pending'")
                waiting = [int(r[0]) for r in rows]
                conn.executemany(
                    "UPDATE outbox SET status = 'uncertain', last_error = ? WHERE id = ?",
                    [(RESTORED, row_id) for row_id in waiting],
                )
                if current:  # (an older backup's history is written by code of its own day)
                    for row_id in waiting:
                        record_history_in(conn, row_id, now_ms)
                replies = len(waiting)
            if "intake" in tables:
                messages = conn.execute(
                    "UPDATE intake SET state = 'rejected', reason = ? WHERE state = 'pending'",
                    (RESTORED,),
                ).rowcount
            for table in ("proactive_intents", "proactive_triggers"):
                if table not in tables:
                    continue
                follow_ups += conn.execute(
                    f"UPDATE {table} SET status = 'skipped', reason = ?, finished_at = ? "
                    "WHERE status = 'pending' AND execute_at <= ?",
                    (RESTORED, now_ms, now_ms),
                ).rowcount
        return Settled(replies, messages, follow_ups)
    except sqlite3.DatabaseError as exc:
        raise VaultError(f"cannot settle the backup's unfinished work: {exc}") from exc
    finally:
        conn.close()


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


def restore(
    backup: Path, target: Path, now: datetime | None = None, *, keep_pending: bool = False
) -> tuple[Path | None, Settled]:
    """Replace `target` with `backup`; return where the replaced file was kept (None: none)
    and what unfinished work of the backup was settled."""
    now = now or datetime.now(UTC)
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
    settled = Settled() if keep_pending else _settle(staging, int(now.timestamp() * 1000))
    for side in _side_files(staging):  # never carried over to the vault's name
        side.unlink(missing_ok=True)
    kept = _set_aside(target, now)
    os.replace(staging, target)
    return kept, settled
