"""The time seam: the manual clock itself is `gateway.core.clock.ManualClock`; this is the
helper that drives code which backs off on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.core.clock import ManualClock


async def run_clock_until(clock: ManualClock, done: Callable[[], bool]) -> None:
    """Let the loop run; whenever everything waits on the manual clock, jump to the next
    wake-up. For code that backs off or polls on the clock (delivery, supervisors)."""
    while not done():
        await asyncio.sleep(0)
        wake = clock.next_wakeup_ms()
        if wake is not None:
            clock.set(wake)


async def until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Let the loop (and round trips to a real server) run until `done()`, bounded. For
    progress with nothing to await: sleepers on a manual clock, a hint arriving over a socket."""
    async with asyncio.timeout(timeout_s):
        while not done():  # noqa: ASYNC110  (nothing to await: see the docstring)
            await asyncio.sleep(0)
