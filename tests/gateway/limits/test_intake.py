"""`user_messages_per_minute`: messages over the rate are saved, not answered, and their sender
gets at most one short notice a minute."""

from __future__ import annotations

from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.limits.intake import MessageRate
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.limits.support import CostingLLM, limits_config, local_ms
from tests.prom import parse


def test_a_sliding_minute_counts_only_accepted_messages() -> None:
    rate = MessageRate(2)
    assert [rate.allow(1, t) for t in (0, 10, 20)] == [True, True, False]
    assert rate.allow(2, 20)  # per user
    assert not rate.allow(1, 59_999)
    assert rate.allow(1, 60_000)  # the first one has left the minute
    assert [rate.notice_due(1, t) for t in (0, 59_999, 60_000)] == [True, False, True]


def test_zero_means_off() -> None:
    rate = MessageRate(0)
    assert all(rate.allow(1, 0) for _ in range(1_000))


async def test_over_the_rate_saved_not_answered_one_notice_a_minute(tmp_path: Path) -> None:
    config = limits_config(tmp_path, user_messages_per_minute=2)
    channel, llm = MemoryChannel(), FakeLLM()
    clock = ManualClock(local_ms("2026-01-05T10:00", "UTC"))
    async with app_with(config, channel, llm, clock=clock) as app:
        for n in range(5):
            await app.router.submit(inbound(f"message {n}"))
        texts = channel.texts()
        assert texts[:2] == ["ok", "ok"]
        assert len(texts) == 3 and "faster than I can take them (2 a minute)" in texts[2]
        assert len(llm.requests) == 2
        # Commands are not messages to the model: they still work.
        await app.router.submit(inbound("/help"))
        assert "/status" in channel.texts()[-1]
        clock.advance(61)
        await app.router.submit(inbound("after a minute"))
        assert channel.texts()[-1] == "ok"
        saved = await app.vault.fetchall("SELECT text FROM messages WHERE role = 'user'")
        assert [r[0] for r in saved][:5] == [f"message {n}" for n in range(5)]
        _, samples = parse(await app.metrics.render())
        refused = [
            v for name, labels, v in samples
            if name == "iris_budget_refusals_total"
            and labels == {"limit": "user_messages_per_minute"}
        ]  # fmt: skip
        assert refused == [3.0]


async def test_over_a_budget_too_the_rate_notice_is_not_sent(tmp_path: Path) -> None:
    # "Wait a minute and write again" would not help: the budget blocks every answer until it
    # resets, and its own notice (once) says when.
    config = limits_config(tmp_path, user_messages_per_minute=1, global_usd_per_day=0.002)
    channel, llm = MemoryChannel(), CostingLLM(2_500)
    clock = ManualClock(local_ms("2026-01-05T10:00", "UTC"))
    async with app_with(config, channel, llm, clock=clock) as app:
        await app.router.submit(inbound("first", user="u1"))  # spends the global budget
        assert channel.texts() == ["ok"]
        clock.advance(61)
        for n in range(3):
            await app.router.submit(inbound(f"more {n}", user="u1"))
        texts = channel.texts()[1:]
        assert len(texts) == 1 and texts[0].startswith("I've used today's budget for everyone.")
        assert len(llm.requests) == 1
