"""Turn slots: the router's bound on turns running at once, which a turn gives back while it
only waits on the model.

Why: a turn spends nearly all of its time waiting for the model. If that wait held one of the
router's global slots, a slow or rate-limited model would fill every slot and freeze every
chat — commands and intake included — for as long as the model stalls. So the router holds a
slot for the turn's own work (recording, commands, tools, replies), and the agent steps out
of it around each model call (`stepped_out()`); how many model calls run at once is bounded
separately (`[llm] max_concurrency`, `gateway/agent/agent.py`), and the time a turn waits for
one of those is part of its model deadline. One chat's wait then holds nothing the others
need: at worst it holds its own chat's lock, for at most the deadline.

The slot a task holds is found through a context variable, so code deep in a turn (the
agent's model call) can step out without the router being passed down. Stepping out when no
slot is held (a background job calling the model) does nothing. Cancellation while waiting to
get a slot back leaves the slot released exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class _Holding:
    slots: TurnSlots
    held: bool


_CURRENT: ContextVar[_Holding | None] = ContextVar("iris_turn_slot", default=None)


class TurnSlots:
    def __init__(self, count: int) -> None:
        self._sem = asyncio.Semaphore(count)

    @property
    def all_held(self) -> bool:
        return self._sem.locked()

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Hold one slot for the body (the router wraps each turn in this)."""
        await self._sem.acquire()
        holding = _Holding(self, held=True)
        token = _CURRENT.set(holding)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            if holding.held:
                self._sem.release()

    @asynccontextmanager
    async def stepped_out(self) -> AsyncIterator[None]:
        """Give this task's slot back for the body and take one again after it."""
        holding = _CURRENT.get()
        if holding is None or holding.slots is not self or not holding.held:
            yield
            return
        holding.held = False
        self._sem.release()
        try:
            yield
        finally:
            await self._sem.acquire()
            holding.held = True
