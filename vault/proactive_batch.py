"""Group commit: transaction bodies submitted at the same time share one COMMIT.

On the development VM a write transaction costs ~300 µs, most of it the COMMIT (the WAL write
and the periodic checkpoint), while its statements take tens of microseconds. When a tick runs
several items at once, their small transactions (begin delivery, mark sending, mark sent and
complete) arrive together; `GroupCommit.run` runs every body that is waiting in ONE
`Vault.run` transaction. Per body nothing changes: its statements are atomic (if one body
raises, the batch is undone and replayed with a SAVEPOINT per body, so only the failing body's
changes are lost and its exception goes to its own caller; bodies are pure SQL over the
database state, so a replay does what the first run did), and its caller resumes only after
the shared COMMIT, so anything written "before the send" is durable before the send. Bodies
of one batch run in submission order.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any, TypeVar, cast

from gateway.errors import VaultError
from vault.db import SyncBody, Vault

T = TypeVar("T")
Entry = tuple[SyncBody[Any], "asyncio.Future[Any]"]


def _run_batch(raw: sqlite3.Connection, batch: list[Entry]) -> list[tuple[bool, Any]]:
    """All bodies in one go (the common case: none fails); if one raises, everything is undone
    and the bodies run again, each in a savepoint of its own."""
    raw.execute("SAVEPOINT batch_all")
    try:
        values = [body(raw) for body, _ in batch]
    except Exception:
        raw.execute("ROLLBACK TO batch_all")
        raw.execute("RELEASE batch_all")
        return _one_by_one(raw, batch)
    raw.execute("RELEASE batch_all")
    return [(True, value) for value in values]


def _one_by_one(raw: sqlite3.Connection, batch: list[Entry]) -> list[tuple[bool, Any]]:
    results: list[tuple[bool, Any]] = []
    for body, _ in batch:
        raw.execute("SAVEPOINT batch_item")
        try:
            value = body(raw)
        except Exception as exc:  # only this body's changes are undone
            raw.execute("ROLLBACK TO batch_item")
            raw.execute("RELEASE batch_item")
            if isinstance(exc, sqlite3.Error):
                error = VaultError(f"vault write failed: {exc}")
                error.__cause__ = exc
                results.append((False, error))
            else:
                results.append((False, exc))
        else:
            raw.execute("RELEASE batch_item")
            results.append((True, value))
    return results


class GroupCommit:
    def __init__(self, vault: Vault, max_batch: int = 64) -> None:
        self.vault = vault
        self.max_batch = max_batch
        self._waiting: list[Entry] = []
        self._lock = asyncio.Lock()

    async def run(self, body: SyncBody[T]) -> T:
        """Run `body` as its own atomic unit, committed together with concurrent ones."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        entry: Entry = (body, future)
        self._waiting.append(entry)
        try:
            async with self._lock:  # the holder commits everything queued meanwhile
                if not future.done():
                    batch = self._waiting[: self.max_batch]
                    del self._waiting[: self.max_batch]
                    await self._commit(batch)
            return cast(T, await future)
        except asyncio.CancelledError:
            # Not yet part of a batch: withdraw it, so nothing is written for a caller that
            # is gone. (Once in a batch it commits, like a cancelled `Vault.run`.)
            self._waiting[:] = [e for e in self._waiting if e[1] is not future]
            raise

    async def _commit(self, batch: list[Entry]) -> None:
        # A task of its own: if the committing caller is cancelled, the others still learn
        # the outcome of the transaction their bodies are part of.
        task = asyncio.ensure_future(self.vault.run(lambda raw: _run_batch(raw, batch)))
        task.add_done_callback(lambda done: _settle(batch, done))
        await asyncio.wait([task])


def _settle(batch: list[Entry], done: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    if done.cancelled():
        failure: BaseException | None = VaultError("group commit cancelled")
    else:
        failure = done.exception()
    for index, (_, future) in enumerate(batch):
        if future.done():
            continue
        if failure is not None:
            future.set_exception(failure)
            continue
        ok, value = done.result()[index]
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
