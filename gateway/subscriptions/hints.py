"""What other replicas did to the subscriptions, heard here: event streams and the trigger cache
woken by wake-up hints, with a poll as the fallback.

With several replicas on one PostgreSQL vault, a trigger may fire on one replica while a
client's event stream is open on another, and a subscription may be created or disabled on a
third. The store sends a hint at the commit of each such write (`vault/subscriptions.py`
`EVENT_HINTS`: the subscription's id for new events, `CHANGED` when the subscriptions changed);
here a hint wakes that subscription's open streams (they read their page from the rows, as for
a local event) or drops the engine's cache of live subscriptions.

A hint may be lost (the listener reconnecting, a replica starting): after every (re)connection
the listener delivers `""`, which wakes every stream and drops the cache, and while it is not
listening the poll does the same every `poll_s` (at most 1 s), so a stream on this replica
still delivers another replica's event within a second. `listening` (shown by `/healthz`)
tells which of the two is in effect. On SQLite there is one process and nothing to hear.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.core.ports import Clock
from gateway.subscriptions.stream import Streams
from gateway.turns.shared_intake import Hints
from vault.subscriptions import CHANGED


class EventHints:
    def __init__(
        self,
        hints: Hints,
        *,
        streams: Streams,
        changed: Callable[[], None],
        clock: Clock,
        poll_s: float = 1.0,
    ) -> None:
        self.hints = hints
        self.streams = streams
        self.changed = changed
        self.clock = clock
        self.poll_s = poll_s

    def on_hint(self, payload: str) -> None:
        if payload == CHANGED:
            self.changed()
        elif payload:
            self.streams.notify(payload)
        else:  # (re)connected, or polling: anything may have happened meanwhile
            self.changed()
            self.streams.notify_all()

    async def run(self) -> None:
        """The listener and the poll, until cancelled (a background job)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.hints.run(self.on_hint), name="event hints")
            tg.create_task(self._poll(), name="event poll")

    async def _poll(self) -> None:
        while True:
            await self.clock.sleep(self.poll_s)
            if not self.hints.listening.is_set():
                self.on_hint("")
