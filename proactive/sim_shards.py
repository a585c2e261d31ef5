"""`iris simulate` on every core: the population in shards, one process each, facts merged.

The simulated users are independent of each other by construction: each draws from a stream
of their own, the model's and the channel's answers are keyed by the item's name (`Names`,
not its id, which depends on the other users' rows), and a step's tick claims everything due.
A shard of the population therefore does exactly what its users do in a run of the whole, and
the merged report is the same, byte for byte, whatever the number of processes. The users are
dealt to the shards by kind (`deal`), so that each gets as many of the costly busy ones.

One thing couples users: the global daily quota. When it never refuses anything, it changes
nothing; it can refuse only on a UTC day with more proactive log rows than the quota, so a
sharded run whose merged log stays within the quota every day is exact, and one that does not
is run again in one process. A quota set (`--global-daily`) below what the users could use
(`per_user_daily` × users) runs in one process straight away.

The workers are started with 'spawn' (never forked from a process running an event loop);
each reports its progress on a queue that a thread of the parent relays to the bar, as the
mean of the shards' simulated time.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.queues import Queue
from typing import Any

from proactive.engine import EngineConfig
from proactive.policy import PolicyConfig
from proactive.sim_facts import Facts, build_report, merge
from proactive.sim_parts import Shard
from proactive.simulate import (
    BUSY,
    LAPSED,
    START_MS,
    Progress,
    SimConfig,
    sim_policy,
    simulate,
    user_stream,
)

Update = tuple[int, int, int] | None  # (shard, virtual ms done, virtual ms in all); None: end
# In a worker: where its progress goes (set by `_start_worker`; empty without a bar).
_UPDATES: list[Queue[Update]] = []


def quiet_logs() -> None:
    """The scripted malformed answers and failed sends are expected: only errors are logged."""
    for name in ("proactive", "gateway.turns.delivery"):
        logging.getLogger(name).setLevel(logging.ERROR)


def binding_quota(cfg: SimConfig, policy: PolicyConfig) -> bool:
    """Could the global quota refuse a send? Then the users are coupled: one process."""
    return cfg.global_daily is not None and cfg.global_daily < policy.per_user_daily * cfg.users


async def run(
    cfg: SimConfig,
    policy: PolicyConfig,
    engine_cfg: EngineConfig,
    *,
    workers: int,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], int]:
    """The report, and how many processes made it (1 when the quota coupled the users)."""
    effective = sim_policy(cfg, policy)
    workers = 1 if binding_quota(cfg, policy) else max(1, min(workers, cfg.users))
    facts = None
    if workers > 1:
        facts = await _sharded(cfg, policy, engine_cfg, workers, progress)
        if max(facts.log_days.values(), default=0) > effective.global_daily:
            facts, workers = None, 1  # the quota may have refused a send: not exact
    if facts is None:
        facts = await simulate(cfg, policy, engine_cfg, progress)
    report = build_report(facts, seed=cfg.seed, days=cfg.days, start_ms=START_MS, policy=effective)
    return report, workers


async def _sharded(
    cfg: SimConfig, policy: PolicyConfig, engine_cfg: EngineConfig, workers: int,
    progress: Progress | None,
) -> Facts:  # fmt: skip
    context = multiprocessing.get_context("spawn")
    updates: Queue[Update] | None = context.Queue() if progress is not None else None
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(updates,)
    ) as pool:
        shards = [
            loop.run_in_executor(pool, _run_shard, cfg, policy, engine_cfg, shard)
            for shard in deal(cfg, workers)
        ]
        if updates is None or progress is None:
            return merge(list(await asyncio.gather(*shards)))
        relay = asyncio.create_task(asyncio.to_thread(_relay, updates, workers, progress))
        try:
            parts = await asyncio.gather(*shards)
        finally:
            updates.put(None)
            await relay
    return merge(list(parts))


def deal(cfg: SimConfig, workers: int) -> list[Shard]:
    """The users dealt to `workers` shards kind by kind — busy, ordinary, lapsed, read from
    each user's first draw — so that every shard gets as many of each: a busy user costs
    several ordinary ones, and a shard's run time is what the whole run waits for."""
    kinds: dict[int, list[int]] = {}
    for n in range(cfg.users):
        profile = user_stream(cfg.seed, n).random()
        kinds.setdefault((profile >= BUSY) - (profile < LAPSED), []).append(n)
    dealt: list[list[int]] = [[] for _ in range(workers)]
    turn = 0
    for kind in sorted(kinds, reverse=True):
        for n in kinds[kind]:
            dealt[turn % workers].append(n)
            turn += 1
    return [Shard(k, tuple(users)) for k, users in enumerate(dealt)]


def _relay(updates: Queue[Update], workers: int, progress: Progress) -> None:
    """Show the mean of the shards' progress until the end marker."""
    done = [0] * workers
    while (update := updates.get()) is not None:
        shard, at, total = update
        done[shard] = at
        progress(sum(done) // workers, total)


def _start_worker(updates: Queue[Update] | None) -> None:
    quiet_logs()
    if updates is not None:
        _UPDATES.append(updates)


def _run_shard(
    cfg: SimConfig, policy: PolicyConfig, engine_cfg: EngineConfig, shard: Shard
) -> Facts:
    """In a worker: simulate one shard, reporting progress at each thousandth of the run."""
    shown = -1

    def progress(done: int, total: int) -> None:
        nonlocal shown
        step = 1000 * done // max(total, 1)
        if step != shown and _UPDATES:
            shown = step
            _UPDATES[0].put((shard.index, done, total))

    return asyncio.run(simulate(cfg, policy, engine_cfg, progress, shard))
