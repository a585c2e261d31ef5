"""Full agency in the gate: the model uses its tools before deciding, the effects stand whatever
it decides (and `/why` says so), a crash between a tool call and the decision neither repeats
the effect nor sends twice, and a group chat never sees the user's private memories."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolResult
from gateway.core.messages import ChatKind
from gateway.core.scope import Scope
from gateway.turns.commands import CommandCall
from proactive.commands import ProactiveCommands
from tests.fakes import inbound
from tests.proactive.support import MIN, Harness, harness
from vault.proactive.gate_calls import GateCalls
from vault.proactive.store import Item


def results(request: LLMRequest) -> list[ToolResult]:
    """The tool results the model was shown in a request's last message."""
    return [p for p in request.messages[-1].parts if isinstance(p, ToolResult)]


async def why(h: Harness, user: str = "u1") -> str:
    commands = {c.name: c for c in ProactiveCommands(
        conversations=h.conversations, store=h.store, plog=h.plog, policy=h.policy,
        calls=GateCalls(h.vault),
    ).commands()}  # fmt: skip
    msg = inbound("/why", user=user, chat=f"chat-{user}")
    rec = await h.conversations.record_inbound(msg, kind="command", tokens=1, now_ms=0)
    assert rec is not None
    scope = Scope(user=msg.user, chat=msg.chat, user_pk=rec.user_pk, chat_pk=rec.chat_pk,
                  session_pk=rec.session_pk, message_pk=rec.message_pk, text="/why",
                  now_ms=h.clock.now_ms(), timezone=rec.timezone)  # fmt: skip
    call = CommandCall(name="why", args="", scope=scope, hint=lambda c: f"/{c}")
    return await commands["why"].handler(call)


async def test_the_model_remembers_then_skips_and_the_memory_stays(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat, what="ask about the move")
        h.llm.enqueue_tool("memory_remember", {"text": "moves to Lisbon in May"})
        h.llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "they moved on"})
        report = await h.engine().tick()
        assert report.outcomes == {"skipped": 1}
        assert h.channel.sent == []
        # The tool ran in the loop and its result went back to the model before it decided.
        assert [r.content for r in results(h.llm.requests[1])] == ["remembered as memory #1"]
        assert [m.text for m in await h.memories.listing(user, limit=10)] == [
            "moves to Lisbon in May"
        ]
        row = await h.row(intent)
        assert row["reason"].startswith("gate: they moved on (kept the effects of 1 tool call")
        answer = await why(h)
        assert "I haven't sent you any proactive message yet." in answer
        assert "I considered follow-up #1" in answer
        assert "did not send it" in answer
        assert "stays done: saved a memory (remembered as memory #1)" in answer
        assert "memory_remember" not in answer


async def test_why_names_an_item_skipped_without_tool_calls(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        await h.intent(user, chat, what="ask about the move")
        h.llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "not useful now"})
        assert (await h.engine().tick()).outcomes == {"skipped": 1}
        answer = await why(h)
        assert "I haven't sent you any proactive message yet." in answer
        assert "I considered follow-up #1" in answer and '"ask about the move"' in answer
        assert "did not send it — gate: not useful now." in answer
        assert "While deciding" not in answer and "stays done" not in answer


@pytest.mark.parametrize("decision", ["skip", "send"])
async def test_a_crash_between_a_tool_call_and_the_decision(tmp_path: Path, decision: str) -> None:
    """The run dies after the memory was kept; the next run repeats the call (the tool and the
    record each keep it once), decides, and sends at most once."""
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat, what="ask about the move")
        stuck = asyncio.Event()

        async def crash_after_the_tool(step: str, item: Item) -> None:
            if step == "gate_tool":
                stuck.set()
                await asyncio.Event().wait()  # hangs until the run is killed

        h.llm.enqueue_tool("memory_remember", {"text": "moves to Lisbon in May"})
        first = asyncio.create_task(h.engine("first", probe=crash_after_the_tool).tick())
        await stuck.wait()
        first.cancel()
        await asyncio.wait([first])
        assert await h.status(intent) == "pending"  # claimed, never decided
        h.clock.advance(h.config.lease_ms / 1000 + 1)
        # The replayed run: the model, told what it did, still calls the tool again.
        h.llm.enqueue_tool("memory_remember", {"text": "moves to Lisbon in May"})
        if decision == "send":
            h.send_decision("Good luck with the move!")
        else:
            h.llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "not now"})
        second = h.engine("second")
        await second.tick()
        await second.tick()
        prompt = h.llm.requests[1].messages[0].parts[0]
        assert isinstance(prompt, TextPart)
        assert "already made these tool calls" in prompt.text
        assert "moves to Lisbon in May" in prompt.text
        assert [r.content for r in results(h.llm.requests[2])] == [
            "already remembered as memory #1"
        ]
        assert len(await h.memories.listing(user, limit=10)) == 1
        calls = await GateCalls(h.vault).of_item("intent", intent)
        assert [(c.tool, c.result) for c in calls] == [
            ("memory_remember", "remembered as memory #1")
        ]
        expected = {"send": ["Good luck with the move!"], "skip": []}[decision]
        assert h.channel.texts() == expected
        assert await h.status(intent) == ("sent" if decision == "send" else "skipped")
        if decision == "send":
            assert "While deciding I used: saved a memory (remembered as memory #1)" in await why(h)


async def test_a_defer_after_a_tool_call_keeps_the_effect_and_says_so(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        h.llm.enqueue_tool("proactive_intent", {"what": "ask about the demo", "delay_minutes": 90})
        h.llm.enqueue_tool("proactive_decision", {"action": "defer", "hours": 2, "reason": "busy"})
        assert (await h.engine().tick()).outcomes == {"deferred": 1}
        row = await h.row(intent)
        assert row["reason"].startswith("gate deferred: busy (kept the effects of 1 tool call")
        pending = await h.store.pending_intents(user)
        assert sorted(i.what for i in pending) == ["ask about the demo", "check the server"]
        answer = await why(h)
        assert "I considered follow-up #1" in answer and "put it off" in answer
        assert "What I did while deciding stays done: scheduled a follow-up (" in answer
        assert "proactive_intent" not in answer  # the user reads what was done, not the tool


async def test_prose_instead_of_a_decision_gets_one_forced_round(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        await h.intent(user, chat)
        h.llm.enqueue_text("Hmm, I think a short nudge would be nice here.")
        h.send_decision("Did the server fix hold up?")
        assert (await h.engine().tick()).outcomes == {"sent": 1}
        forced = h.llm.requests[1]
        assert forced.tool_choice == "proactive_decision"
        assert h.channel.texts() == ["Did the server fix hold up?"]  # never the prose


async def test_a_tool_loop_that_never_decides_is_capped_then_forced(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        for _ in range(4):  # the gate's default cap
            h.llm.enqueue_tool("proactive_list", {})
        h.llm.enqueue_text("[SKIP] still thinking")  # not even the forced round decides
        assert (await h.engine().tick()).outcomes == {"skipped": 1}
        assert len(h.llm.requests) == 5
        assert h.llm.requests[-1].tool_choice == "proactive_decision"
        assert (await h.row(intent))["reason"].startswith("malformed decision, skipped")
        assert h.channel.sent == []


async def test_the_gate_offers_only_proactive_tools_and_runs_no_other(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        await h.memories.remember(user, "likes tea", 0)
        await h.intent(user, chat)
        h.llm.enqueue_tool("memory_forget", {"id": 1})  # not offered: refused if called anyway
        h.llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "no"})
        await h.engine().tick()
        offered = {t.name for t in h.llm.requests[0].tools}
        assert "memory_forget" not in offered
        assert results(h.llm.requests[1])[0].content == "unknown tool: memory_forget"
        assert [m.text for m in await h.memories.listing(user, limit=5)] == ["likes tea"]


async def test_a_group_gate_never_sees_private_memories(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, group = await h.user("u1", chat="team", kind=ChatKind.GROUP)
        await h.memories.remember(user, "salary is 9000", 0)
        await h.intent(user, group)
        h.llm.enqueue_tool("memory_search", {"query": "salary"})
        h.send_decision("Any update on the release?")
        await h.engine().tick()
        prompt = h.llm.requests[0].messages[0].parts[0]
        assert isinstance(prompt, TextPart)
        assert "salary" not in prompt.text
        assert "This is a group chat" in prompt.text
        searched = results(h.llm.requests[1])[0]
        assert searched.is_error
        assert "private" in searched.content
        assert "9000" not in searched.content


async def test_a_slow_gate_keeps_to_its_chat_lock(tmp_path: Path) -> None:
    """The gate's tool loop runs inside the chat lock, like a turn of that chat."""
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        await h.intent(user, chat)
        inside = asyncio.Event()
        release = asyncio.Event()

        async def gate(request: LLMRequest, chat_key: str | None) -> LLMResponse:
            inside.set()
            await release.wait()
            h.send_decision("hi")
            return await h.llm.complete(request)

        h.call_model = gate  # type: ignore[method-assign]
        tick = asyncio.create_task(h.engine().tick())
        await inside.wait()
        assert h.locks.locks["memory:chat-u1"].locked()
        release.set()
        await tick
        assert h.channel.texts() == ["hi"]


async def test_tool_calls_are_recorded_even_when_the_model_then_fails(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        h.llm.enqueue_tool("memory_remember", {"text": "on call this week"})
        h.llm.enqueue_error()  # the model is down after the tool call
        assert (await h.engine().tick()).outcomes == {"deferred": 1}
        row = await h.row(intent)
        assert row["reason"] == "waiting: model unavailable"
        assert row["execute_at"] == h.clock.now_ms() + 15 * MIN
        calls = await GateCalls(h.vault).of_item("intent", intent)
        assert [c.tool for c in calls] == ["memory_remember"]
