"""Whether the machine has a core to spare for work that can wait: read from `/proc/stat`.

The analyzer's embeddings are such work (a tip is a nicety; the reply is not): under a load
that keeps the cores busy, every embedding is CPU taken from the turns, one for one. So,
before it embeds a chat message, the analyzer asks `SpareCore` (`[analyzer] embed_share`
below 1; the composition root passes it) whether, the embedding model's own work aside,

- now: the runnable tasks (`procs_running`, counting the caller; less `excluded_now`, the
  model's threads running) leave a core free, and
- lately: `FREE_MIN`, a whole core, was left over the last `WINDOW_S` seconds or more
  (the machine's busy time less `excluded`, the model's CPU seconds so far).

The model's own work is left out so that the analyzer's embeddings do not shut themselves
off: what matters is whether anything else wants the core they would use. The instant check
answers at once when a burst starts after a quiet spell, before a window holds any of it.

On two cores this admits while everything else uses up to one core: the event loop of a
busy gateway takes one core at most, so the second is the model's unless other processes
need it. A saturating burst (a closed loop against an instant fake model keeps both cores
busy with the gateway and its fakes) leaves none, and its messages are judged by the rules.

Before there is a window (the first call, or after a quiet spell) only the instant check
counts; where the file cannot be read, the answer is yes: the analyzer's other bounds (its
share of embedding time, the messages waiting for the model) still hold.

Where it errs, it errs towards the rules: unlike the model's thread count
(`embed_threads.py`), the instant check lets no burst pass, so a vault read running at that
moment declines the embedding; on one core the window must show three quarters of
it free (`FREE_MIN_ONE_CORE`: the gateway's own turns use some of it); a process pinned to
some of the machine's CPUs (a container with a CPU set) reads their `cpuN` lines and skips
the machine-wide instant check; in a container the file is usually the host's, so other
tenants count and a busy host sheds more; a CPU quota (`--cpus`) is not seen at all. Set
`[analyzer] embed_share = 1` to embed every message whatever the load.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Literal

from gateway.knowledge.embed_threads import (
    FRESH_S,
    BusyWindow,
    busy_seconds,
    clock_ticks,
    procs_running,
    read_stat,
    usable_cpus,
)

# The share of a core that must have been free of everything but the embedding model's own
# calls: a whole one, the core an embedding runs on; on one core, most of it (the gateway's
# own turns take some of it even when nobody else does).
FREE_MIN = 1.0
FREE_MIN_ONE_CORE = 0.75


def pinned_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on when that is fewer than the machine has (a pinned
    container or process), else None."""
    try:
        mine = os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return None
    return frozenset(mine) if len(mine) < (os.cpu_count() or len(mine)) else None


class SpareCore:
    def __init__(
        self,
        *,
        excluded: Callable[[], float] = lambda: 0.0,
        excluded_now: Callable[[], int] = lambda: 0,
        read: Callable[[], bytes | None] = read_stat,
        cpus: int | None = None,
        pinned: frozenset[int] | Literal["auto"] | None = "auto",
        clock: Callable[[], float] = time.monotonic,
        tick: float | None = None,
    ) -> None:
        self._excluded = excluded
        self._excluded_now = excluded_now
        self._read = read
        self._pinned = pinned_cpus() if pinned == "auto" else pinned
        self._cpus = len(self._pinned) if self._pinned else cpus or usable_cpus()
        self._free_min = FREE_MIN if self._cpus >= 2 else FREE_MIN_ONE_CORE
        self._tick = tick if tick is not None else 1 / clock_ticks()
        self._window = BusyWindow(clock, stale_after=FRESH_S)

    def sample(self, stat: bytes) -> float | None:
        """Cores kept busy, the excluded work aside, over the last `WINDOW_S` seconds or more
        (up to twice that: older marks, after a quiet spell, start a new window); None before
        there is a window or when `stat` cannot be read. Moves the window on."""
        busy = busy_seconds(stat, self._tick, self._pinned)
        return None if busy is None else self._window.cores(busy, self._excluded())

    def __call__(self) -> bool:
        stat = self._read()
        if stat is None:
            return True
        # The runnable tasks are counted machine-wide: no use to a process pinned to some CPUs.
        running = None if self._pinned else procs_running(stat)
        if running is not None and running - self._excluded_now() > max(self._cpus - 1, 1):
            return False
        used = self.sample(stat)
        return used is None or self._cpus - used >= self._free_min
