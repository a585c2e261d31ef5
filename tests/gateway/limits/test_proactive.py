"""Proactive work over budget: an AI follow-up is skipped with the limit as its recorded reason
(no gate call is made); a reminder the user asked for still goes out, as plain text."""

from __future__ import annotations

from pathlib import Path

from gateway.core.admin_ops import NewIntent
from gateway.core.clock import ManualClock
from proactive.feature import ProactiveFeature
from tests.conftest import app_with
from tests.fakes import MemoryChannel, inbound
from tests.gateway.limits.support import CostingLLM, limits_config, local_ms


async def test_follow_ups_over_budget(tmp_path: Path) -> None:
    config = limits_config(tmp_path, user_usd_per_day=0.001)
    clock = ManualClock(local_ms("2026-01-05T12:00", "UTC"))
    channel, llm = MemoryChannel(), CostingLLM(1_500)
    async with app_with(config, channel, llm, clock=clock) as app:
        await app.router.submit(inbound("spend it all"))
        ops = app.contributions.ops
        assert ops is not None
        engine = app.feature(ProactiveFeature).engine
        assert engine is not None
        follow_up = await ops.register(
            NewIntent(user="memory:u1", chat="memory:c1", what="ask how the fix went",
                      delay_minutes=5),
            now_ms=clock.now_ms(),
        )  # fmt: skip
        clock.advance(10 * 60)
        await engine.tick()
        reminder = await ops.register(
            NewIntent(user="memory:u1", chat="memory:c1", what="water the plants",
                      delay_minutes=5, kind="user_reminder"),
            now_ms=clock.now_ms(),
        )  # fmt: skip
        clock.advance(10 * 60)
        await engine.tick()
        rows = await app.vault.fetchall("SELECT id, status, reason FROM proactive_intents")
        found = {r[0]: (r[1], r[2]) for r in rows}
    assert found[follow_up["id"]] == ("skipped", "over budget: user_usd_per_day")
    assert found[reminder["id"]][0] == "sent"
    assert "water the plants" in channel.texts()[-1]
    assert [r.purpose for r in llm.requests] == ["chat"]  # no gate call was made
