"""Server-sent events and polling over the stored events of a subscription.

Both read the same rows by `seq`: a poll returns the page after its cursor, a stream first
replays what came after `Last-Event-ID` (or only new events without one) and then waits for the
engine's `notify`. A waiter registers before it reads, so an event stored between its read and
its wait still wakes it. With several replicas, another replica's events wake it through
`hints.py`. An idle stream yields a keep-alive every `keepalive_s`; when the
client went away the write fails, the generator is closed and its waiter goes with it. A
stream of a deleted subscription ends: at once when deleted here, within a keep-alive when on
another replica.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator

from gateway.core.errors import VaultError
from gateway.features.contributions import StreamEvent
from vault.subscriptions import EventRow, SubscriptionStore

PAGE = 100


def event_data(row: EventRow) -> str:
    return json.dumps(row.payload, separators=(",", ":"), ensure_ascii=False)


class Streams:
    def __init__(self, store: SubscriptionStore, *, keepalive_s: float) -> None:
        self.store = store
        self.keepalive_s = keepalive_s
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._left = asyncio.Event()  # replaced each time a stream ends
        self._ended: set[str] = set()  # deleted here: a woken stream checks and ends

    def ended(self, sub_id: str) -> None:
        """The subscription was deleted: its open streams end (the client sees the stream
        close instead of keep-alives of nothing, forever)."""
        self._ended.add(sub_id)
        self.notify(sub_id)

    async def _deleted(self, sub_id: str) -> bool:
        """Whether the subscription is gone; with the vault away, not known: the stream goes on
        with its keep-alives (it did before this check existed)."""
        try:
            return await self.store.get(sub_id) is None
        except VaultError:
            return False

    def notify(self, sub_id: str) -> None:
        for waiter in self._waiters.get(sub_id, ()):
            waiter.set()

    def notify_all(self) -> None:
        """Wake every open stream: what another replica stored may have been missed."""
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()

    def listeners(self, sub_id: str) -> int:
        return len(self._waiters.get(sub_id, ()))

    async def quiet(self, sub_id: str) -> None:
        """Return once no stream of `sub_id` is open (tests, shutdown)."""
        while self.listeners(sub_id):
            await self._left.wait()

    async def page(self, sub_id: str, after: int) -> tuple[list[EventRow], int]:
        rows = await self.store.events_since(sub_id, after, PAGE)
        await self.store.mark_shown([r.seq for r in rows])
        return rows, rows[-1].seq if rows else after

    async def latest(self, sub_id: str) -> int:
        """The seq a stream without `Last-Event-ID` starts after: the newest event's."""
        return await self.store.last_seq(sub_id)

    async def events(self, sub_id: str, after: int) -> AsyncGenerator[StreamEvent | None, None]:
        waiter = asyncio.Event()
        self._waiters.setdefault(sub_id, set()).add(waiter)
        try:
            while True:
                waiter.clear()
                if sub_id in self._ended and await self._deleted(sub_id):
                    return
                rows, after = await self.page(sub_id, after)
                for row in rows:
                    yield StreamEvent(str(row.seq), event_data(row))
                if rows:
                    continue
                try:
                    await asyncio.wait_for(waiter.wait(), self.keepalive_s)
                except TimeoutError:
                    # Still there? (Deleted here, `ended` woke it already; on another replica,
                    # this finds out within one keep-alive.)
                    if await self._deleted(sub_id):
                        return
                    yield None
        finally:
            found = self._waiters.get(sub_id)
            if found is not None:
                found.discard(waiter)
                if not found:
                    del self._waiters[sub_id]
            left, self._left = self._left, asyncio.Event()
            left.set()
