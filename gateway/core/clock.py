"""Clocks: the system clock for production, a manual clock for tests and the simulator.

Everything that decides by time (engine, delivery backoff, policies) asks a `Clock`, so a test
can move time forward instead of sleeping, and the simulator can run days in seconds.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, when_ms: int) -> None:
        await self.sleep((when_ms - self.now_ms()) / 1000)


class ManualClock:
    """Time moves only when a test calls `advance`; sleepers wake in order of their deadline."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00Z
        self._now = start_ms
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + int(seconds * 1000))

    async def sleep_until(self, when_ms: int) -> None:
        if when_ms <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when_ms, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def next_wakeup_ms(self) -> int | None:
        pending = [w for w, _, f in self._sleepers if not f.done()]
        return min(pending) if pending else None

    def advance(self, seconds: float) -> None:
        self.set(self._now + int(seconds * 1000))

    def set(self, when_ms: int) -> None:
        self._now = max(self._now, when_ms)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)


def wall_ms() -> int:
    """The wall clock in epoch milliseconds, for stamps that are not decisions (a platform's
    receive time); decisions ask a `Clock`."""
    return int(time.time() * 1000)


_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory", "leap-seconds.list", "leapseconds"})


def check_timezone(name: str) -> str:
    """Return `name` if it is an IANA zone; raise ValueError otherwise."""
    # The longest IANA name has 32 characters; a much longer one would reach the file system
    # as a path too long to open (OSError, not the ValueError of a bad name).
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise ValueError("not an IANA time zone (e.g. Europe/Berlin)")
    # Files in a system's zoneinfo folder that are no zone of their own: the host's zone
    # (`localtime`, which changes with the host), a template, a placeholder, and the copies
    # under `posix/` and `right/` (leap seconds counted: about 27 s off).
    if name in _NOT_ZONES or name.startswith(("posix/", "right/")):
        raise ValueError("not an IANA time zone (e.g. Europe/Berlin)")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError("not an IANA time zone (e.g. Europe/Berlin)") from exc
    return name
