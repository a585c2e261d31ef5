"""Gate parsing: the decision tool, exact text markers, and malformed markers never sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.core.llm import LLMResponse, TextPart, ToolCall
from gateway.core.messages import ChatKind
from proactive.gate import DECISION_TOOL, looks_like_marker, parse_decision, reminder_text
from tests.proactive.support import harness
from vault.memories import Memories


def tool(args: dict[str, Any]) -> LLMResponse:
    return LLMResponse(parts=(ToolCall("t1", DECISION_TOOL, args),), stop_reason="tool_use",
                       model="fake")  # fmt: skip


def text(body: str) -> LLMResponse:
    return LLMResponse(parts=(TextPart(body),), stop_reason="end_turn", model="fake")


def test_tool_call_decisions() -> None:
    sent = parse_decision(tool({"action": "send", "message": " Did the fix work? "}))
    assert (sent.action, sent.message, sent.malformed) == ("send", "Did the fix work?", False)
    skip = parse_decision(tool({"action": "skip", "reason": "already solved"}))
    assert (skip.action, skip.reason) == ("skip", "already solved")
    defer = parse_decision(tool({"action": "defer", "hours": 3}))
    assert (defer.action, defer.hours) == ("defer", 3.0)


@pytest.mark.parametrize(
    "args",
    [
        {"action": "send", "message": ""},
        {"action": "send", "message": "[SKIP]"},
        {"action": "send", "message": "Hi! [DEFER 2h]"},
        {"action": "send", "message": "HEARTBEAT_OK"},
        {"action": "send", "message": "x" * 5000},
        {"action": "explode"},
        {"message": "no action"},
    ],
)
def test_unusable_tool_calls_become_malformed_skips(args: dict[str, Any]) -> None:
    decision = parse_decision(tool(args))
    assert decision.action == "skip"
    assert decision.malformed


@pytest.mark.parametrize(
    ("hours", "kept"), [(0, 0.25), (-1, 0.25), (500, 72.0), (float("inf"), 72.0)]
)
def test_a_defer_out_of_range_is_kept_within_it(hours: float, kept: float) -> None:
    decision = parse_decision(tool({"action": "defer", "hours": hours, "reason": "busy"}))
    assert (decision.action, decision.hours, decision.malformed) == ("defer", kept, False)
    assert decision.reason == f"busy ({hours:g} h asked, {kept:g} h kept)"


def test_exact_text_markers_are_accepted() -> None:
    assert parse_decision(text("[SKIP]")).action == "skip"
    assert not parse_decision(text("  [SKIP]\n")).malformed
    defer = parse_decision(text("[DEFER 3h]"))
    assert (defer.action, defer.hours) == ("defer", 3.0)
    assert parse_decision(text("[DEFER 1.5h]")).hours == 1.5


@pytest.mark.parametrize(
    "body",
    [
        "[SKIP] because nothing changed",
        "[skip]",
        "[DEFER 30m]",
        "[DEFER 3 h]",
        "Sure, I'll skip this. [SILENT]",
        "HEARTBEAT_OK",
        "Hey, how did the server fix go?",  # prose without the tool is not a decision
        "",
    ],
)
def test_anything_else_is_a_malformed_skip(body: str) -> None:
    decision = parse_decision(text(body))
    assert decision.action == "skip"
    assert decision.malformed


def test_reminder_fallback_never_carries_a_marker() -> None:
    assert reminder_text("call mom") == "Reminder: call mom"
    assert reminder_text("[SKIP] pay rent HEARTBEAT_OK") == "Reminder: pay rent"
    assert not looks_like_marker(reminder_text("[DEFER 2h]"))


def test_markdown_link_is_not_a_marker() -> None:
    decision = parse_decision(tool({"action": "send", "message": "See [the docs](http://x)"}))
    assert decision.action == "send"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "body", ["[SKIP] because nothing changed", "[DEFER 30m]", "HEARTBEAT_OK", "Hello there"]
)
async def test_malformed_markers_never_reach_the_user(tmp_path: Path, body: str) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        h.llm.enqueue_text(body)
        await h.engine().tick()
        assert h.channel.sent == []
        row = await h.row(intent)
        assert row["status"] == "skipped"
        assert row["reason"].startswith("malformed")
        outbox = await h.vault.scalar("SELECT count(*) FROM outbox")
        assert outbox == 0


@pytest.mark.parametrize("kind", [ChatKind.DM, ChatKind.GROUP])
async def test_the_gate_sees_the_users_memories_only_in_a_direct_chat(
    tmp_path: Path, kind: ChatKind
) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1", chat="room", kind=kind)
        await Memories(h.vault).remember(user, "is recovering from surgery", h.clock.now_ms())
        await h.intent(user, chat)
        h.auto_send = "How are things?"
        await h.engine().tick()
        prompt = str(h.llm.requests[-1].messages)
        assert ("recovering from surgery" in prompt) is (kind is ChatKind.DM)
