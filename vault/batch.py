"""Batched thread hops: bodies submitted at the same time run together on one connection.

Each `await` of an aiosqlite call is a round trip: queue the call, wake the connection's
thread, then wake the event loop again (a write to its self-pipe) and resume the task. Under
load that round trip, not SQLite, is most of the CPU a statement costs, and a writer lock held
across it makes every other chat wait a whole event-loop cycle per transaction. A `Batcher`
keeps one hop in flight per connection; whatever is submitted meanwhile waits and then runs
in the next hop, all of it at once. An idle vault pays nothing extra: a lone body is a batch of
one, and the hop starts at once.

What a batch does around its bodies is the `Runner`'s job: `write_batch` wraps them in one
`BEGIN IMMEDIATE … COMMIT` (group commit), each body in a SAVEPOINT of its own, so a failing
body loses only its own statements; `read_batch` just runs them. Every caller gets its own
outcome, value or exception, once the batch is done (for writes: committed).

A caller cancelled while its body still waits withdraws it: nothing runs for it. Once its
batch has started the body runs (and commits) like any write already sent on its way. If the
loop itself shuts down while a batch is on the worker thread, its callers are told the outcome
is unknown (it may still commit), and whatever was still waiting fails without running.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import aiosqlite

from gateway.core.errors import VaultError

T = TypeVar("T")
SyncBody = Callable[[sqlite3.Connection], T]
Outcome = tuple[bool, Any]  # (True, value) or (False, exception)
Runner = Callable[[sqlite3.Connection, list[SyncBody[Any]]], list[Outcome]]
Entry = tuple[SyncBody[Any], "asyncio.Future[Any]"]
# How a batch reaches its connection's thread: `hop(fn)` runs `fn(raw connection)` there.
Hop = Callable[[SyncBody[list[Outcome]]], Awaitable[list[Outcome]]]

MAX_BATCH = 128
LAZY_S = 0.05  # the longest write-behind work waits for a batch to join


async def on_connection_thread(conn: aiosqlite.Connection, fn: SyncBody[T]) -> T:
    """Run `fn(raw sqlite3 connection)` on the aiosqlite connection's own worker thread.

    aiosqlite offers no public call for this; `_execute` and `_conn` are the library's own
    queue-a-callable and the connection it wraps (stable for years; the dependency is pinned
    below 0.23). This and `raw_connection` are the only places that touch them.
    """
    result: T = await conn._execute(fn, raw_connection(conn))  # type: ignore[no-untyped-call]
    return result


def raw_connection(conn: aiosqlite.Connection) -> sqlite3.Connection:
    """The sqlite3 connection an aiosqlite connection wraps (see `on_connection_thread`)."""
    raw: sqlite3.Connection = conn._conn
    return raw


def _failure(exc: BaseException, what: str) -> Exception:
    # StopIteration can't be set on a future (it would end the coroutine awaiting it instead),
    # and a BaseException (a CancelledError raised by a body) must not pass for a cancellation.
    if isinstance(exc, sqlite3.Error | StopIteration) or not isinstance(exc, Exception):
        error = VaultError(f"vault {what} failed: {exc!r}")
        error.__cause__ = exc
        return error
    return exc


def _one(raw: sqlite3.Connection, body: SyncBody[Any], savepoint: bool) -> Outcome:
    if savepoint:
        raw.execute("SAVEPOINT body")
    try:
        value = body(raw)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        if not raw.in_transaction:
            # SQLite rolled the whole transaction back (a full disk, an I/O error, OR ROLLBACK):
            # the batch's earlier bodies are lost too, so the batch fails as a whole.
            raise
        if savepoint:  # only this body's statements are undone
            raw.execute("ROLLBACK TO body")
            raw.execute("RELEASE body")
        return False, _failure(exc, "write")
    if savepoint:
        raw.execute("RELEASE body")
    return True, value


def write_batch(raw: sqlite3.Connection, bodies: list[SyncBody[Any]]) -> list[Outcome]:
    """One write transaction for all `bodies`, in order; a lone body needs no savepoint."""
    raw.execute("BEGIN IMMEDIATE")
    try:
        alone = len(bodies) == 1
        outcomes = [_one(raw, body, savepoint=not alone) for body in bodies]
        if alone and not outcomes[0][0]:
            raw.execute("ROLLBACK")  # its only body failed: nothing to keep
        else:
            raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise
    return outcomes


def read_batch(raw: sqlite3.Connection, bodies: list[SyncBody[Any]]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for body in bodies:
        try:
            outcomes.append((True, body(raw)))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            outcomes.append((False, _failure(exc, "read")))
    return outcomes


class Batcher:
    """Runs submitted bodies on a connection's thread (`hop`), as many per hop as are waiting.

    `lock`, when given, is held for each hop (the writer lock, which `Vault.transaction()`
    holds too). `what` names the side in errors ("write" or "read").
    """

    def __init__(
        self,
        hop: Hop,
        runner: Runner,
        *,
        what: str,
        lock: asyncio.Lock | None = None,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._hop_to = hop
        self._runner = runner
        self._what = what
        self._lock = lock
        self._max_batch = max_batch
        self._waiting: list[Entry] = []
        self._flusher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None  # when lazy entries stop waiting

    async def submit(self, body: SyncBody[T]) -> T:
        # Cancelling the caller cancels the future: a body still waiting is then skipped.
        return cast(T, await self.queue(body))

    def queue(self, body: SyncBody[T], *, lazy: bool = False) -> asyncio.Future[T]:
        """Queue `body`; the future settles when its batch is done.

        `lazy` (write-behind work nobody waits for): the body starts no hop of its own; it
        joins the next batch something else starts, in order, or runs `LAZY_S` later at the
        latest (and at once on `idle()`).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._waiting.append((body, future))
        if lazy:
            if self._flusher is None and self._timer is None:
                self._timer = loop.call_later(LAZY_S, self._start)
        elif self._flusher is None:
            self._start()
        return future

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flusher is None:
            flusher = asyncio.get_running_loop().create_task(
                self._flush(), name=f"vault-{self._what}s"
            )
            flusher.add_done_callback(self._flusher_done)
            self._flusher = flusher

    async def idle(self) -> None:
        """Wait until everything submitted so far has run (write-behind work included)."""
        while self._waiting or self._flusher is not None:
            if self._flusher is None:
                self._start()
            assert self._flusher is not None
            await asyncio.wait([self._flusher])

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch = [e for e in self._waiting[: self._max_batch] if not e[1].done()]
                del self._waiting[: self._max_batch]
                if batch:
                    await self._hop(batch)
        finally:
            self._flusher = None

    def _flusher_done(self, flusher: asyncio.Task[None]) -> None:
        # A flusher cancelled before its first step never ran its `finally`.
        if self._flusher is flusher:
            self._flusher = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            waiting, self._waiting = self._waiting, []
            _fail(waiting, f"vault {self._what} interrupted before it ran")

    async def _hop(self, batch: list[Entry]) -> None:
        bodies = [body for body, _ in batch]
        try:
            outcomes = await self._run(bodies)
        except asyncio.CancelledError:
            # The loop is shutting down. The batch was on its way to the worker thread and may
            # still commit there: its callers can't be told either way. Nothing else runs.
            waiting, self._waiting = self._waiting, []
            _fail(waiting, f"vault {self._what} interrupted before it ran")
            _fail(batch, f"vault {self._what} outcome unknown (interrupted)")
            raise
        except Exception as exc:  # the batch as a whole: a closed vault, a failed COMMIT
            _fail(batch, f"vault {self._what} failed: {exc}", exc)
            return
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: answer, then stop
            waiting, self._waiting = self._waiting, []
            _fail(batch + waiting, f"vault {self._what} failed: {exc!r}", exc)
            raise
        for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    async def _run(self, bodies: list[SyncBody[Any]]) -> list[Outcome]:
        runner = self._runner
        if self._lock is None:
            return await self._hop_to(lambda raw: runner(raw, bodies))
        async with self._lock:
            return await self._hop_to(lambda raw: runner(raw, bodies))


def _fail(entries: list[Entry], message: str, cause: BaseException | None = None) -> None:
    for _, future in entries:
        if not future.done():
            error = VaultError(message)
            error.__cause__ = cause
            future.set_exception(error)
