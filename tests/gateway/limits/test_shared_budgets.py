"""Budgets shared by replicas on one real PostgreSQL: two independent `SharedBudgets`, each on
its own vault connections (as two `iris run` processes would have), racing for the last of a
user's and of everyone's budget make at most one call over the cap in total; a hold left by a
replica that died expires; each replica's figures include the other's spend and calls in
flight; and the app picks the shared budgets on PostgreSQL only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.core.clock import ManualClock
from gateway.core.errors import OverBudget
from gateway.core.llm import LLMMessage, LLMRequest, Payer, TextPart
from gateway.core.metrics import Metrics
from gateway.limits.budgets import Budgets
from gateway.limits.feature import LimitsFeature
from gateway.limits.prices import estimate
from gateway.limits.settings import LimitsSection
from gateway.limits.shared import SharedBudgets
from tests.conftest import app_with
from tests.fakes import MemoryChannel, inbound
from tests.gateway.limits.support import (
    MODEL,
    OFF,
    ONE_MICRO,
    CostingLLM,
    limits_config,
    local_ms,
    usage,
)
from vault.backend import vault_for
from vault.budget_holds import BUDGET_HINTS, SharedSpendStore
from vault.db import Vault
from vault.migrations import migrate
from vault.pg.notify import Notifications

START_MS = local_ms("2026-01-05T10:00", "UTC")
LEASE_S = 60.0


def request_for(user_pk: int) -> LLMRequest:
    text = (TextPart("how much is left?"),)
    return LLMRequest(
        system_stable="", messages=(LLMMessage("user", text),), max_tokens=64,
        payer=Payer(user_pk=user_pk, timezone="UTC"),
    )  # fmt: skip


ESTIMATE = estimate(request_for(1), LimitsSection(prices={MODEL: ONE_MICRO}).prices[MODEL])


async def add_users(vault: Vault, n: int) -> list[int]:
    found = []
    for i in range(n):
        rows = await vault.write(
            """INSERT INTO users (channel, user_id, timezone, first_seen_ms, last_seen_ms)
               VALUES ('test', ?, 'UTC', 0, 0) RETURNING id""",
            (f"u{i}",),
        )
        found.append(int(rows[0][0]))
    return found


@asynccontextmanager
async def replica(
    pg_url: str, tmp_path: Path, name: str, clock: ManualClock, **limits: Any
) -> AsyncIterator[SharedBudgets]:
    """One replica's budgets on its own connections, listening for the others' settles."""
    async with vault_for(tmp_path / f"{name}.db", pg_url) as vault:
        await migrate(vault)
        budgets = SharedBudgets(
            store=SharedSpendStore(vault), owner=name, lease_s=LEASE_S, poll_s=0.05,
            settings=LimitsSection(**{**OFF, "prices": {MODEL: ONE_MICRO}, **limits}),
            clock=clock, metrics=Metrics(), is_admin=lambda key: False, default_timezone="UTC",
        )  # fmt: skip
        hints = Notifications(pg_url, BUDGET_HINTS)
        listening = asyncio.create_task(hints.run(budgets.hint))
        try:
            await hints.listening.wait()
            yield budgets
            await vault.idle()
        finally:
            listening.cancel()
            await asyncio.wait([listening])


@pytest.mark.parametrize("limit", ["user", "global"])
async def test_two_replicas_racing_for_the_last_of_a_budget_make_at_most_one_call_over_it(
    pg_url: str, tmp_path: Path, limit: str
) -> None:
    cap, cost, calls = 1_000, ESTIMATE.tokens - 5, 16  # real usage within the estimate
    limits = {"user_tokens_per_day": cap} if limit == "user" else {"global_usd_per_day": 0.001}
    clock = ManualClock(START_MS)
    arrived: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
    made = {"a": 0, "b": 0}
    refused = 0
    async with (
        replica(pg_url, tmp_path, "a", clock, **limits) as a,
        replica(pg_url, tmp_path, "b", clock, **limits) as b,
    ):
        users = await add_users(a.store.vault, calls if limit == "global" else 1)

        async def call(i: int) -> None:
            nonlocal refused
            budgets, name = (a, "a") if i % 2 else (b, "b")
            try:
                hold = await budgets.admit(request_for(users[i % len(users)]), MODEL)
            except OverBudget:
                refused += 1
                return
            made[name] += 1
            release: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            await arrived.put(release)
            await release
            hold.settle(usage(input_tokens=cost))

        everything = asyncio.gather(*(call(i) for i in range(calls)))
        while not everything.done():
            came = asyncio.ensure_future(arrived.get())
            either: set[asyncio.Future[Any]] = {came, everything}
            done, _ = await asyncio.wait(either, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert done, "no progress"
            if came in done:
                came.result().set_result(None)
            else:
                came.cancel()
        await everything
        spent_by = sum(made.values()) * cost
        assert made["a"] > 0 and made["b"] > 0  # both replicas spent from the one budget
        assert refused > 0
        assert spent_by >= cap  # the budget was used...
        assert spent_by - cost < cap  # ...and only the last call crossed the cap
        await a.store.vault.idle()
        await b.store.vault.idle()
        shown = await b.global_meter()
        assert shown.committed == spent_by and shown.in_flight == 0


async def test_a_hold_left_by_a_replica_that_died_expires(pg_url: str, tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    cap = 1_000
    async with replica(pg_url, tmp_path, "b", clock, user_tokens_per_day=cap) as b:
        (user,) = await add_users(b.store.vault, 1)
        payer = Payer(user_pk=user, timezone="UTC")
        async with replica(pg_url, tmp_path, "a", clock, user_tokens_per_day=cap) as a:
            spent = await a.admit(request_for(user), MODEL)
            spent.settle(usage(input_tokens=cap - ESTIMATE.tokens - 10))  # room for one call
            await a.admit(request_for(user), MODEL)  # in flight when replica a dies
        # b sees a's spend and the call a left in flight: its own call no longer fits
        meter = (await b.user_meters(payer)).tokens_day
        assert (meter.committed, meter.reserved, meter.in_flight) == (
            cap - ESTIMATE.tokens - 10, ESTIMATE.tokens, 1,
        )  # fmt: skip
        waiting = asyncio.create_task(b.admit(request_for(user), MODEL))
        clock.advance(LEASE_S)  # the dead replica's hold expires
        async with asyncio.timeout(10):
            hold = await waiting  # admitted as the window's last call
        meter = (await b.user_meters(payer)).tokens_day
        assert (meter.reserved, meter.in_flight) == (ESTIMATE.tokens, 1)  # b's own, only
        hold.settle(usage(input_tokens=ESTIMATE.tokens))
        await b.store.vault.idle()
        meter = (await b.user_meters(payer)).tokens_day
        assert (meter.committed, meter.in_flight) == (cap - 10, 0)
        assert await b.store.vault.fetchall("SELECT owner FROM budget_holds") == []


async def test_the_app_shares_budgets_on_postgresql_and_keeps_them_in_memory_on_sqlite(
    pg_url: str, tmp_path: Path
) -> None:
    for url, kind in (("", Budgets), (pg_url, SharedBudgets)):
        where = tmp_path / kind.__name__
        where.mkdir()
        vault = {"path": str(where / "iris.db"), "url": url}
        config = limits_config(where, user_tokens_per_day=100_000, vault=vault)
        channel = MemoryChannel()
        async with app_with(config, channel, CostingLLM(300)) as app:
            budgets = app.feature(LimitsFeature).budgets
            assert type(budgets) is kind
            await app.router.submit(inbound("hello"))
            await app.router.submit(inbound("/status"))
            status = channel.texts()[-1]
            assert "99,700 of 100,000 tokens left today" in status
