"""Items of one tick running concurrently: quotas can't be exceeded by a race, one chat's items
keep their order, and a stop mid-tick leaves every item in one terminal state."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.core.llm import LLMRequest, LLMResponse, ToolCall
from proactive.policy import PolicyConfig
from tests.proactive.support import BlockingChannel, harness


def _send(message: str) -> LLMResponse:
    call = ToolCall("d", "proactive_decision", {"action": "send", "message": message})
    return LLMResponse(parts=(call,), stop_reason="tool_use", model="fake")


@pytest.mark.parametrize("limit", ["per_user", "global", "spacing"])
async def test_two_engines_racing_for_the_last_slot_send_once(tmp_path: Path, limit: str) -> None:
    limits = {
        "per_user": {"per_user_daily": 1},
        "global": {"global_daily": 1},
        "spacing": {"min_spacing_ms": 90 * 60_000},
    }[limit]
    policy = PolicyConfig(jitter_max_ms=0, **limits)  # type: ignore[arg-type]
    # One item per engine tick: each engine holds one of the two items.
    async with harness(tmp_path, policy=policy, max_per_tick=1) as h:
        second_user = "u2" if limit == "global" else "u1"
        a_user, a_chat = await h.user("u1", chat="chat-a")
        b_user, b_chat = await h.user(second_user, chat="chat-b")
        ids = [await h.intent(a_user, a_chat), await h.intent(b_user, b_chat)]
        gated, both = 0, asyncio.Event()

        async def gate(request: LLMRequest, chat_key: str | None) -> LLMResponse:
            nonlocal gated
            gated += 1
            if gated == 2:
                both.set()
            await both.wait()  # both passed the policy before either writes its outbox row
            return _send(f"hello {chat_key}")

        h.call_model = gate  # type: ignore[method-assign]
        first, second = await asyncio.gather(h.engine("a").tick(), h.engine("b").tick())
        assert gated == 2
        assert first.outcomes | second.outcomes == {"sent": 1, "deferred": 1}
        assert len(h.channel.sent) == 1
        counted = await h.vault.scalar(
            "SELECT count(*) FROM proactive_log WHERE status IN ('delivering', 'sent')"
        )
        assert counted == 1
        rows = [await h.row(i) for i in ids]
        deferred = [r for r in rows if r["status"] == "pending"]
        assert len(deferred) == 1
        reason = "spacing" if limit == "spacing" else "quota"
        assert deferred[0]["reason"] == f"{reason} reached while sending"
        assert deferred[0]["claim"] is None


async def test_one_users_items_in_two_chats_run_one_after_the_other(tmp_path: Path) -> None:
    """Within one engine a user's items share a queue: the second sees the first's send in
    the policy and waits for the spacing without a gate call."""
    policy = PolicyConfig(jitter_max_ms=0, min_spacing_ms=90 * 60_000)
    async with harness(tmp_path, policy=policy, concurrency=8) as h:
        h.auto_send = "hello"
        user, chat_a = await h.user("u1", chat="chat-a")
        _, chat_b = await h.user("u1", chat="chat-b")
        first = await h.intent(user, chat_a, confidence=0.9)
        second = await h.intent(user, chat_b, confidence=0.7)
        report = await h.engine().tick()
        assert report.outcomes == {"sent": 1, "deferred": 1}
        assert len(h.llm.requests) == 1
        assert await h.status(first) == "sent"
        row = await h.row(second)
        # 12:00 UTC, two messages left today: paced to 12:00 + (22:00 - 12:00) / 3.
        assert row["execute_at"] == h.clock.now_ms() + 200 * 60_000
        assert row["reason"].startswith("spacing")


async def test_one_chats_items_run_in_claim_order_while_chats_run_concurrently(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, concurrency=8) as h:
        user, chat = await h.user("u1")
        now = h.clock.now_ms()
        first = await h.intent(user, chat, at=now - 3000, what="ALPHA")
        second = await h.intent(user, chat, at=now - 2000, what="BRAVO")
        others = [await h.user(f"v{n}") for n in range(5)]
        for u, c in others:
            await h.intent(u, c)

        async def gate(request: LLMRequest, chat_key: str | None) -> LLMResponse:
            prompt = str(request.messages[-1])
            label = "first" if "ALPHA" in prompt else "second" if "BRAVO" in prompt else "x"
            await asyncio.sleep(0)
            return _send(f"{label} {chat_key}")

        h.call_model = gate  # type: ignore[method-assign]
        report = await h.engine().tick()
        assert report.outcomes == {"sent": 7}
        mine = [o.text for o in h.channel.sent if o.chat.chat_id == "chat-u1"]
        assert [t.split()[0] for t in mine] == ["first", "second"]
        assert (await h.row(first))["finished_at"] <= (await h.row(second))["finished_at"]
        history = await h.vault.fetchall(
            "SELECT text FROM messages WHERE chat = ? AND kind = 'proactive' ORDER BY id", (chat,)
        )
        assert [r[0].split()[0] for r in history] == ["first", "second"]


async def test_a_stop_with_several_items_in_flight_leaves_each_in_one_terminal_state(
    tmp_path: Path,
) -> None:
    channel = BlockingChannel()
    async with harness(tmp_path, channel=channel, concurrency=4) as h:
        h.auto_send = "hello"
        ids = []
        for n in range(6):
            u, c = await h.user(f"u{n}")
            ids.append(await h.intent(u, c))
        task = asyncio.create_task(h.engine("first").tick())
        await channel.entered.wait()
        task.cancel()
        await asyncio.wait([task])
        await h.vault.idle()  # writes already on their way land (like a crash after them)
        # A send cut off by the stop is `sending` (a crash) or already `uncertain` (the
        # delivery marks an attempt it saw cancelled mid-way).
        in_flight = {
            r[0]
            for r in await h.vault.fetchall(
                "SELECT idempotency_key FROM outbox WHERE status IN ('sending', 'uncertain')"
            )
        }
        assert in_flight  # at least the send that signalled
        channel.release.set()
        h.clock.advance(h.config.lease_ms / 1000 + 1)
        restarted = h.engine("second")
        await restarted.tick()
        await restarted.tick()
        statuses = {i: await h.status(i) for i in ids}
        uncertain = {f"proactive:intent:{i}" for i, s in statuses.items() if s == "uncertain"}
        assert uncertain == in_flight  # exactly the sends that may have gone out
        assert set(statuses.values()) <= {"sent", "uncertain"}
        keys = [o.idempotency_key for o in channel.sent]
        assert len(keys) == len(set(keys))
        assert set(keys) == {f"proactive:intent:{i}" for i, s in statuses.items() if s == "sent"}
        logged = await h.vault.fetchall("SELECT source_id, status FROM proactive_log")
        assert sorted(tuple(r) for r in logged) == sorted(statuses.items())
