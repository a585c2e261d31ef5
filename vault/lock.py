"""Who is using a vault file: an advisory lock beside it (`iris.db.lock`).

`iris run` and `iris chat` hold a shared lock for their whole life (any number of them may);
`iris db restore` needs the exclusive lock, so it refuses while Iris runs on that vault. Each
also holds a lock of its own kind (`iris.db.run.lock`, `iris.db.chat.lock`): one of each per
SQLite vault (on PostgreSQL replicas run side by side; one `iris chat` is kept by an advisory
lock). The
lock is `flock(2)` on an open file: the kernel drops it when the process ends however it
ends, so a crash never leaves a stale lock behind (a pid file would).

On PostgreSQL (`[vault] url`) nothing is locked: replicas on several machines share the
database by design, a file beside the unused local `path` would guard nothing (and fail on a
read-only container file system), and `iris db restore` does not apply (pg_restore does).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from gateway.core.errors import VaultError


def lock_path(vault_path: Path) -> Path:
    return vault_path.with_name(vault_path.name + ".lock")


@contextmanager
def _locked(vault_path: Path, how: int, busy: str, suffix: str = ".lock") -> Iterator[None]:
    path = vault_path.with_name(vault_path.name + suffix)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise VaultError(f"cannot open the lock file {path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
        except BlockingIOError:
            raise VaultError(busy) from None
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def in_use(vault_path: Path, url: str = "") -> Iterator[None]:
    """Held while Iris serves on the vault (shared: several processes may); a no-op when the
    vault is the PostgreSQL database at `url`."""
    if url:
        yield
        return
    with _locked(vault_path, fcntl.LOCK_SH, f"{vault_path} is being restored; try again"):
        yield


@contextmanager
def exclusive(vault_path: Path) -> Iterator[None]:
    """Held while the vault file is replaced: nobody else may have it open through Iris."""
    busy = f"Iris is running on {vault_path} (iris run or iris chat): stop it first"
    with _locked(vault_path, fcntl.LOCK_EX, busy):
        yield


@contextmanager
def one_run(vault_path: Path, url: str = "") -> Iterator[None]:
    """Held by `iris run` (beside `in_use`): one serving process per SQLite vault. A second
    would poll the same bot (or take the same webhooks), run the same follow-ups and resend
    the same waiting replies; several processes share a vault only on PostgreSQL, as
    replicas, where this takes nothing."""
    if url:
        yield
        return
    busy = f"another iris run is using {vault_path}: one iris run per SQLite vault"
    with _locked(vault_path, fcntl.LOCK_EX, busy, ".run.lock"):
        yield


@asynccontextmanager
async def one_chat(vault_path: Path, url: str = "") -> AsyncIterator[None]:
    """Held by `iris chat` (beside `in_use`): one terminal chat per vault. Two would share the
    one local conversation, and each would take the other's unanswered messages for ones a
    crash left behind. A lock file beside the vault file; on PostgreSQL, where there is no
    file, an advisory lock (`vault.pg.leader.held_alone`)."""
    if url:
        from vault.pg.leader import held_alone  # the postgres extra: only with a URL

        busy = "another iris chat is using this PostgreSQL vault: one terminal chat at a time"
        async with held_alone(url, "chat", busy):
            yield
        return
    busy = f"another iris chat is using {vault_path}: one terminal chat per vault at a time"
    with _locked(vault_path, fcntl.LOCK_EX, busy, ".chat.lock"):
        yield
