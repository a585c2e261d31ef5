"""The engine end to end on a real vault: send, defer, quiet hours, quotas, reminders, missing
model, delivery outcomes, missed runs, and the claim under concurrency."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.core.errors import (
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
    ModelRejected,
)
from gateway.core.messages import ChatRef
from proactive.policy import PolicyConfig
from tests.proactive.support import DAY, HOUR, MIN, harness, utc_ms


def _chat(user: str) -> ChatRef:
    return ChatRef(channel="memory", chat_id=f"chat-{user}")


async def test_send_records_everything_and_stores_no_meta_prompt(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1", "Europe/Berlin")
        intent = await h.intent(user, chat)
        h.send_decision("How did the server fix go?")
        report = await h.engine().tick()
        assert report.outcomes == {"sent": 1}
        assert h.channel.texts() == ["How did the server fix go?"]
        assert h.channel.sent[0].kind.value == "proactive"
        row = await h.row(intent)
        assert (row["status"], row["reason"]) == ("sent", "sent")
        log = await h.vault.fetchone("SELECT status, type, source_id FROM proactive_log")
        assert tuple(log) == ("sent", "intent", intent)  # type: ignore[arg-type]
        messages = await h.vault.fetchall("SELECT role, kind, text FROM messages ORDER BY id")
        assert [tuple(m) for m in messages] == [
            ("user", "chat", "hello"),
            ("assistant", "proactive", "How did the server fix go?"),
        ]
        prompt = h.llm.requests[0]
        assert prompt.purpose == "proactive_gate"
        # The model may use its proactive tools before it decides; nothing is forced.
        assert prompt.tool_choice is None
        offered = {t.name for t in prompt.tools}
        assert {"proactive_decision", "memory_remember", "proactive_intent"} <= offered
        assert not offered & {"memory_forget", "proactive_execute", "proactive_scan"}
        assert "check the server" in prompt.messages[0].parts[0].text  # type: ignore[union-attr]
        # A second tick finds nothing and calls no model.
        assert (await h.engine().tick()).claimed == 0
        assert len(h.llm.requests) == 1


async def test_not_due_items_cost_no_model_call(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        await h.intent(user, chat, at=h.clock.now_ms() + HOUR)
        assert (await h.engine().tick()).claimed == 0
        assert h.llm.requests == []


async def test_defer_reschedules_and_runs_later(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        h.llm.enqueue_tool("proactive_decision", {"action": "defer", "hours": 3, "reason": "busy"})
        engine = h.engine()
        assert (await engine.tick()).outcomes == {"deferred": 1}
        row = await h.row(intent)
        assert row["status"] == "pending"
        assert row["execute_at"] == h.clock.now_ms() + 3 * HOUR
        assert row["deferrals"] == 1
        assert "busy" in row["reason"]
        h.clock.advance(3 * 3600 - 60)
        assert (await engine.tick()).claimed == 0
        h.clock.advance(60)
        h.send_decision("Back to the server thing: did it work?")
        assert (await engine.tick()).outcomes == {"sent": 1}
        assert await h.status(intent) == "sent"


async def test_text_defer_marker_reschedules(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        h.llm.enqueue_text("[DEFER 2h]")
        await h.engine().tick()
        assert (await h.row(intent))["execute_at"] == h.clock.now_ms() + 2 * HOUR
        assert h.channel.sent == []


async def test_quiet_hours_reschedule_without_calling_the_model(tmp_path: Path) -> None:
    async with harness(tmp_path, start="2026-01-10T22:30:00") as h:  # 23:30 in Berlin
        user, chat = await h.user("u1", "Europe/Berlin")
        first = await h.intent(user, chat, what="one")
        second = await h.intent(user, chat, what="two")
        other, other_chat = await h.user("u2", "Europe/Berlin")
        third = await h.intent(other, other_chat)
        await h.engine().tick()
        rows = [await h.row(i) for i in (first, second, third)]
        assert {r["status"] for r in rows} == {"pending"}
        # Released within the two hours after 08:00 CET, on a whole minute...
        opens, closes = utc_ms("2026-01-11T07:00:00"), utc_ms("2026-01-11T09:00:00")
        for row in rows:
            assert opens <= row["execute_at"] < closes
            assert row["execute_at"] % 60_000 == 0
        # ...one user's items at the same instant (the engine orders them then).
        assert rows[0]["execute_at"] == rows[1]["execute_at"]
        assert h.llm.requests == []


async def test_per_user_quota_defers_the_fourth(tmp_path: Path) -> None:
    async with harness(tmp_path, start="2026-01-10T10:00:00") as h:
        user, chat = await h.user("u1", "Asia/Tokyo")  # 19:00 local
        ids = [await h.intent(user, chat, what=f"item {n}") for n in range(4)]
        for _ in range(3):
            h.send_decision()
        report = await h.engine().tick()
        assert report.outcomes == {"sent": 3, "deferred": 1}
        last = await h.row(ids[3])
        # Tomorrow's release window in Tokyo (08:00–10:00 JST).
        assert utc_ms("2026-01-10T23:00:00") <= last["execute_at"] < utc_ms("2026-01-11T01:00:00")
        assert len(h.llm.requests) == 3


async def test_user_reminder_bypasses_gate_skip_and_quota(tmp_path: Path) -> None:
    async with harness(tmp_path, policy=PolicyConfig(jitter_max_ms=0, per_user_daily=0)) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat, kind="user_reminder", what="call mom", confidence=0.1)
        h.llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "meh"})
        await h.engine().tick()
        assert h.channel.texts() == ["Reminder: call mom"]
        assert await h.status(intent) == "sent"


async def test_without_a_model_ai_items_wait_and_reminders_still_go_out(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        h.model_available = False
        user, chat = await h.user("u1")
        ai = await h.intent(user, chat)
        reminder = await h.intent(user, chat, kind="user_reminder", what="stretch")
        await h.engine().tick()
        row = await h.row(ai)
        assert (row["status"], row["reason"]) == ("pending", "waiting: no model configured")
        assert row["execute_at"] == h.clock.now_ms() + HOUR
        assert await h.status(reminder) == "sent"
        assert h.channel.texts() == ["Reminder: stretch"]
        # After the maximum age the waiting item expires instead of waiting forever.
        h.clock.advance(8 * DAY / 1000)
        await h.engine().tick()
        assert await h.status(ai) == "expired"


async def test_model_down_reschedules_and_rejection_fails(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        first = await h.intent(user, chat)
        h.llm.enqueue_error()
        await h.engine().tick()
        assert (await h.row(first))["reason"] == "waiting: model unavailable"
        h.clock.advance(15 * 60)
        h.llm.enqueue_error(ModelRejected("bad request"))
        await h.engine().tick()
        row = await h.row(first)
        assert (row["status"], row["reason"]) == ("failed", "gate failed: ModelRejected")


async def test_delivery_outcomes_are_terminal_and_never_resent(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        h.channel.fail_with.extend(
            [DeliveryPermanent("gone"), DeliveryTransient("slow"), DeliveryUncertain("timeout")]
        )
        failed = await h.intent(user, chat, what="a")
        uncertain = await h.intent(user, chat, what="b", at=h.clock.now_ms() + 1)
        h.send_decision("first")
        h.send_decision("second")
        h.clock.advance(1)
        await h.engine().tick()
        assert await h.status(failed) == "failed"
        assert await h.status(uncertain) == "uncertain"
        assert h.channel.sent == []
        h.clock.advance(DAY / 1000)
        await h.engine().tick()
        assert h.channel.sent == []
        # The uncertain message may have reached the user: it is part of the conversation.
        kinds = await h.vault.fetchall("SELECT text FROM messages WHERE kind = 'proactive'")
        assert [k[0] for k in kinds] == ["second"]


async def test_missed_runs_run_once_late_without_burst_and_old_ones_expire(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, max_per_tick=10) as h:
        h.auto_send = "late hello"
        users = [await h.user(f"u{n}") for n in range(15)]
        now = h.clock.now_ms()
        recent = [await h.intent(u, c, at=now - 2 * HOUR) for u, c in users]
        stale = [await h.intent(u, c, at=now - 8 * DAY) for u, c in users[:5]]
        engine = h.engine()
        first = await engine.tick()
        assert (first.claimed, first.expired_unclaimed) == (10, 5)
        assert {await h.status(i) for i in stale} == {"expired"}
        second = await engine.tick()
        assert second.claimed == 5
        rows = [await h.row(i) for i in recent]
        assert {r["status"] for r in rows} == {"sent"}
        assert all("late by 120 min" in r["reason"] for r in rows)
        assert len(h.channel.sent) == 15


async def test_opted_out_user_is_skipped_and_unreachable_chat_fails(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        await h.conversations.update_settings(user, {"proactive_enabled": False})
        skipped = await h.intent(user, chat)
        other, other_chat = await h.user("u2")
        await h.conversations.mark_unreachable(_chat("u2"), 1)
        failed = await h.intent(other, other_chat)
        await h.engine().tick()
        assert await h.status(skipped) == "skipped"
        assert await h.status(failed) == "failed"
        assert h.llm.requests == []


async def test_two_engines_never_process_the_same_row(tmp_path: Path) -> None:
    async with harness(tmp_path, max_per_tick=7) as h:
        h.auto_send = "hi"
        for n in range(40):
            u, c = await h.user(f"u{n}")
            await h.intent(u, c)
        a, b = h.engine("a"), h.engine("b")
        for _ in range(4):
            await asyncio.gather(a.tick(), b.tick())
        keys = [o.idempotency_key for o in h.channel.sent]
        assert len(keys) == 40
        assert len(set(keys)) == 40
        assert len(h.llm.requests) == 40
        assert await h.store.counts("intent") == {"sent": 40}


async def test_run_loop_executes_due_items_on_the_clock_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, poll_interval_s=60) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat, at=h.clock.now_ms() + 5 * MIN)
        engine = h.engine()
        h.send_decision("ping")
        task = asyncio.create_task(engine.run())
        for _ in range(5):
            # Yield until both loops wait on the manual clock (no wall-clock time passes).
            while h.clock.sleepers < 2:  # noqa: ASYNC110
                await asyncio.sleep(0)
            h.clock.advance(60)
        while await h.status(intent) in ("pending", "delivering"):  # noqa: ASYNC110
            await asyncio.sleep(0)
        assert h.channel.texts() == ["ping"]
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
