"""Budgets through the whole app: one notice per window, the message saved, resets at the
user's local midnight (DST days included) and month end, a restart, concurrent turns racing
for the last tokens, admins, the global budget, and `/status`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.app.app import App
from gateway.app.config import Config
from gateway.core.clock import ManualClock
from gateway.core.errors import OverBudget
from gateway.limits.feature import LimitsFeature
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.limits.support import (
    MODEL,
    CostingLLM,
    HeldLLM,
    limits_config,
    local_ms,
    usage,
)

NY = "America/New_York"
TOPIC = [
    "I want to bake sourdough bread this weekend",
    "My starter is five days old and doubles in about 8 hours",
    "What hydration should I use for a first loaf with bread flour?",
]
SHIFT = "What documents does a freelancer need for a tax return in Spain?"


@dataclass
class Chat:
    app: App
    channel: MemoryChannel
    clock: ManualClock

    async def say(self, text: str, *, user: str = "u1", chat: str = "c1") -> str | None:
        """What the user got back for this message (None: nothing)."""
        before = len(self.channel.sent)
        await self.app.router.submit(inbound(text, user=user, chat=chat))
        new = self.channel.texts()[before:]
        return new[-1] if new else None

    async def saved(self) -> list[str]:
        rows = await self.app.vault.fetchall(
            "SELECT text FROM messages WHERE role = 'user' ORDER BY id"
        )
        return [r[0] for r in rows]


@asynccontextmanager
async def running(config: Config, llm: FakeLLM, start_ms: int) -> AsyncIterator[Chat]:
    channel, clock = MemoryChannel(), ManualClock(start_ms)
    async with app_with(config, channel, llm, clock=clock) as app:
        yield Chat(app, channel, clock)


async def test_one_notice_per_day_then_silence_until_local_midnight_after_spring_forward(
    tmp_path: Path,
) -> None:
    config = limits_config(tmp_path, user_usd_per_day=0.001)  # 1,000 tokens' worth
    llm = CostingLLM(1_500)
    async with running(config, llm, local_ms("2026-03-08T09:00", NY)) as chat:
        assert (await chat.say(f"/tz {NY}") or "").startswith("Time zone set")
        assert await chat.say("first question") == "ok"  # the call that takes it over the cap
        notice = await chat.say("second question")
        assert notice is not None and "today's budget of $0.001." in notice
        assert "00:00 on Mon 9 Mar (America/New_York)" in notice
        assert "saved" in notice
        assert await chat.say("third question") is None  # told once per window
        audited = await chat.app.vault.fetchall(
            "SELECT actor, action, outcome, args FROM audit_log WHERE action LIKE 'limits%'"
        )
        assert [tuple(r)[:3] for r in audited] == [("memory:u1", "limits over budget", "refused")]
        assert '"window": "2026-03-08"' in audited[0]["args"]  # once for the window, audited
        # The 23-hour day: 24 h after its start would be 01:00 local; it ends at midnight.
        chat.clock.set(local_ms("2026-03-08T23:59:59", NY))
        assert await chat.say("still today") is None
        chat.clock.set(local_ms("2026-03-09T00:00", NY))
        assert await chat.say("a new day") == "ok"
        assert len(llm.requests) == 2
        assert await chat.saved() == [
            f"/tz {NY}",
            "first question",
            "second question",
            "third question",
            "still today",
            "a new day",
        ]


async def test_the_25_hour_day_after_fall_back_resets_at_local_midnight(
    tmp_path: Path,
) -> None:
    config = limits_config(tmp_path, user_usd_per_day=0.001)
    async with running(config, CostingLLM(1_500), local_ms("2026-11-01T20:00", NY)) as chat:
        await chat.say(f"/tz {NY}")
        assert await chat.say("spend") == "ok"
        assert "00:00 on Mon 2 Nov" in (await chat.say("over") or "")
        chat.clock.set(local_ms("2026-11-01T23:30", NY))  # 24 h after the day began
        assert await chat.say("still the first") is None
        chat.clock.set(local_ms("2026-11-02T00:00", NY))
        assert await chat.say("next day") == "ok"


async def test_the_month_ends_at_local_midnight_of_the_last_day(
    tmp_path: Path,
) -> None:
    zone = "Pacific/Auckland"
    config = limits_config(tmp_path, user_usd_per_month=0.002)
    async with running(config, CostingLLM(1_500), local_ms("2026-01-30T10:00", zone)) as chat:
        await chat.say(f"/tz {zone}")
        assert await chat.say("day one") == "ok"
        chat.clock.set(local_ms("2026-01-31T10:00", zone))
        assert await chat.say("day two") == "ok"  # 1,500 spent: the day's spend adds up
        notice = await chat.say("day two again") or ""
        assert "this month's budget" in notice
        assert "00:00 on Sun 1 Feb (Pacific/Auckland)" in notice
        chat.clock.set(local_ms("2026-01-31T23:59:59", zone))
        assert await chat.say("last second") is None
        chat.clock.set(local_ms("2026-02-01T00:00", zone))  # still January 31st in UTC
        assert await chat.say("february") == "ok"


async def test_a_time_zone_where_it_is_already_tomorrow_buys_no_fresh_day(
    tmp_path: Path,
) -> None:
    """Over today's budget at 12:00 UTC, `/tz Pacific/Kiritimati` (UTC+14: 02:00 tomorrow)
    gave a fresh day's budget at once; today's spend now follows the user to their new day."""
    config = limits_config(tmp_path, user_usd_per_day=0.001)
    llm = CostingLLM(1_500)
    async with running(config, llm, local_ms("2026-01-05T12:00", "UTC")) as chat:
        assert await chat.say("spend") == "ok"
        notice = await chat.say("over")
        assert notice is not None and "budget" in notice
        assert (await chat.say("/tz Pacific/Kiritimati") or "").startswith("Time zone set")
        calls = len(llm.requests)
        again = await chat.say("and now?")  # still over, told when it resets over there
        assert again is not None
        assert "resets at 00:00 on Wed 7 Jan (Pacific/Kiritimati)" in again
        assert len(llm.requests) == calls
        report = await chat.app.feature(LimitsFeature).report.report("memory:u1")
        today = report["user"]["budgets"][1]
        assert (today["spent"], today["remaining"]) == (0.0015, 0.0)
        chat.clock.advance(24 * 3600)  # the next day there: a fresh budget
        assert await chat.say("a new day") == "ok"


async def test_spend_and_the_notice_survive_a_restart(tmp_path: Path) -> None:
    config = limits_config(tmp_path, user_usd_per_day=0.001)
    start = local_ms("2026-01-05T10:00", "UTC")
    async with running(config, CostingLLM(1_500), start) as chat:
        assert await chat.say("spend") == "ok"
        assert await chat.say("over") is not None
    llm = CostingLLM(1_500)
    async with running(config, llm, start + 60_000) as chat:
        assert await chat.say("after the restart") is None
        assert llm.requests == []
        report = await chat.app.feature(LimitsFeature).report.report("memory:u1")
        today = report["user"]["budgets"][1]
        assert (today["limit"], today["spent"], today["remaining"]) == (
            "user_usd_per_day",
            0.0015,
            0.0,
        )


async def test_concurrent_turns_racing_the_last_tokens_make_at_most_one_call_over_the_cap(
    tmp_path: Path,
) -> None:
    cap, cost = 1_000, 300
    config = limits_config(tmp_path, user_tokens_per_day=cap)
    llm = HeldLLM(cost)
    async with running(config, llm, local_ms("2026-01-05T10:00", "UTC")) as chat:
        turns = [chat.app.router.submit(inbound(f"question {i}", chat=f"c{i}")) for i in range(10)]
        everything = asyncio.gather(*turns)
        made = 0
        while not everything.done():
            arrived = asyncio.ensure_future(llm.arrived.get())
            either: set[asyncio.Future[Any]] = {arrived, everything}
            done, _ = await asyncio.wait(either, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert done, "no progress"
            if arrived in done:
                made += 1
                arrived.result().set_result(None)
            else:
                arrived.cancel()
        await everything
    spent = made * cost
    assert spent >= cap  # the budget was used...
    assert spent - cost < cap  # ...and only the last call crossed the cap
    notices = [t for t in chat.channel.texts() if "allowance" in t]
    assert len(notices) == 1  # the other refused turns of the day were saved silently
    assert len(chat.channel.texts()) == made + 1


async def test_turns_run_side_by_side_while_the_budget_has_room(
    tmp_path: Path,
) -> None:
    config = limits_config(tmp_path, user_tokens_per_day=1_000_000)
    llm = HeldLLM(300)
    async with running(config, llm, local_ms("2026-01-05T10:00", "UTC")) as chat:
        turns = [chat.app.router.submit(inbound(f"q {i}", chat=f"c{i}")) for i in range(5)]
        held = [await asyncio.wait_for(llm.arrived.get(), 10) for _ in turns]
        assert llm.most_in_flight == 5
        for release in held:
            release.set_result(None)
        await asyncio.wait_for(asyncio.gather(*turns), 10)


@pytest.mark.parametrize(("exempt", "answered"), [(True, "ok"), (False, None)])
async def test_admins_are_exempt_only_when_configured(
    tmp_path: Path, exempt: bool, answered: str | None
) -> None:
    config = limits_config(
        tmp_path,
        user_usd_per_day=0.001,
        admins_exempt=exempt,
        auth={"admins": ["memory:boss"], "allow": ["memory:*"]},
    )
    async with running(config, CostingLLM(1_500), local_ms("2026-01-05T10:00", "UTC")) as chat:
        await chat.say("spend", user="boss")
        second = await chat.say("again", user="boss")
        assert second == answered or (answered is None and "budget" in (second or ""))
        status = await chat.say("/status", user="boss") or ""
        assert ("no limits for admins" in status) is exempt


async def test_the_global_budget_stops_everyone_and_names_no_figures(
    tmp_path: Path,
) -> None:
    config = limits_config(tmp_path, global_usd_per_day=0.002)
    async with running(config, CostingLLM(2_500), local_ms("2026-01-05T10:00", "UTC")) as chat:
        await chat.say("/tz Asia/Tokyo", user="other", chat="c2")
        assert await chat.say("big question") == "ok"
        notice = await chat.say("hello", user="other", chat="c2") or ""
        assert notice.startswith("I've used today's budget for everyone.")
        assert "09:00 on Tue 6 Jan (Asia/Tokyo)" in notice  # midnight UTC, on their clock
        assert "$" not in notice
        # /status gives the same time for it (not the user's own midnight).
        status = (await chat.say("/status", user="other", chat="c2") or "").splitlines()[-1]
        assert status == (
            "Budget: the budget for everyone is used up until 09:00 on Tue 6 Jan (Asia/Tokyo)"
        )


async def test_compact_over_budget_says_so_and_calls_nothing(
    tmp_path: Path,
) -> None:
    config = limits_config(tmp_path, user_usd_per_day=0.001)
    llm = CostingLLM(1_500)
    async with running(config, llm, local_ms("2026-01-05T10:00", "UTC")) as chat:
        await chat.say("spend")
        answer = await chat.say("/compact") or ""
        assert "today's budget" in answer and "00:00 on Tue 6 Jan (UTC)" in answer
        assert len(llm.requests) == 1
        assert all(r.payer is not None for r in llm.requests)


async def test_the_usage_log_keeps_cache_figures(tmp_path: Path) -> None:
    llm = FakeLLM()
    llm.replies.append(usage(input_tokens=10, output_tokens=5, cache_read=700, cache_write=300))
    async with running(make_config(tmp_path), llm, local_ms("2026-01-05T10:00", "UTC")) as chat:
        await chat.say("hello")
        await chat.app.usage.flush()
        row = await chat.app.vault.fetchone(
            "SELECT cache_read_tokens, cache_write_tokens FROM llm_calls"
        )
        assert row is not None and tuple(row) == (700, 300)


async def test_status_shows_what_is_left(tmp_path: Path) -> None:
    config = make_config(tmp_path)  # the defaults: $5 a day, $50 a month, claude-sonnet-5-5
    llm = FakeLLM()
    llm.replies.append(usage(input_tokens=1_000, output_tokens=500))  # $0.007
    async with running(config, llm, local_ms("2026-01-05T10:00", "UTC")) as chat:
        await chat.say("hello")
        status = await chat.say("/status") or ""
        assert status.splitlines()[-1] == (
            "Budget: $4.99 of $5.00 left today, $49.99 of $50.00 left this month; "
            "the day resets at 00:00 on Tue 6 Jan (UTC)"
        )


async def test_the_analyzer_confirmation_spends_the_users_budget(
    tmp_path: Path,
) -> None:
    # A wide band: the shift is put to the confirmation whichever analyzer mode judges it.
    # No share bounds: a message shed under the machine's load is not put to it.
    analyzer = {"confirm_model": MODEL, "confirm_band": 1.0, "embed_share": 1}
    config = limits_config(tmp_path, user_usd_per_day=1.0, analyzer=analyzer)
    llm = CostingLLM(10)
    llm.default = "continuation"  # the reply to every call, the confirmation's included
    async with running(config, llm, local_ms("2026-01-05T10:00", "UTC")) as chat:
        for text in [*TOPIC, SHIFT]:
            await chat.say(text)
        spent = (await chat.app.feature(LimitsFeature).report.report("memory:u1"))["user"]
    purposes = [r.purpose for r in llm.requests]
    # One chat call per message; the confirmation (asked near the threshold, beside the chat
    # call) at least for the shift.
    assert purposes.count("chat") == 4 and purposes.count("analyzer") >= 1
    assert set(purposes) == {"chat", "analyzer"}
    assert {r.payer for r in llm.requests} == {llm.requests[0].payer}
    assert spent["budgets"][1]["spent"] == len(purposes) * 10 / 1_000_000


def test_over_budget_is_a_user_input_error_with_its_window() -> None:
    exc = OverBudget("text", limit="user_usd_per_day", window="2026-03-08", resets_at_ms=1)
    assert (exc.user_message, exc.limit, exc.window, exc.resets_at_ms) == (
        "text",
        "user_usd_per_day",
        "2026-03-08",
        1,
    )
