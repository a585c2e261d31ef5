"""What users and the model touch: tools (scoped to the chat's user), commands with bad input,
the context provider, engagement marking, and the wiring in the app."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.llm import ToolResult
from proactive.feature import ProactiveFeature
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound


def midday(app: App) -> ManualClock:
    """The fixture's clock starts at 00:00 UTC, inside the default quiet hours."""
    assert isinstance(app.clock, ManualClock)
    app.clock.advance(12 * 3600)
    return app.clock


async def say(app: App, text: str, user: str = "u1") -> None:
    await app.router.submit(inbound(text, user=user, chat=f"chat-{user}"))


def last_tool_result(llm: FakeLLM) -> ToolResult:
    parts = llm.requests[-1].messages[-1].parts
    result = parts[0]
    assert isinstance(result, ToolResult)
    return result


async def test_a_reminder_for_a_user_with_proactive_off_says_it_will_not_come(
    app: App, llm: FakeLLM
) -> None:
    """It was registered ("Registered #5"), the model promised it, and at its time it was
    skipped: "the user turned proactive messages off"."""
    await say(app, "/proactive off")
    llm.enqueue_tool("proactive_intent", {"what": "call the bank", "kind": "user_reminder",
                                          "delay_minutes": 60})  # fmt: skip
    llm.enqueue_text("I'll remind you.")
    await say(app, "remind me in an hour to call the bank")
    said = last_tool_result(llm).content
    assert said.startswith("Registered #1")
    assert "turned proactive messages off (/proactive off): it will not be sent" in said
    await say(app, "/proactive on")
    llm.enqueue_tool("proactive_intent", {"what": "call mum", "kind": "user_reminder",
                                          "delay_minutes": 60})  # fmt: skip
    llm.enqueue_text("Sure.")
    await say(app, "remind me in an hour to call mum")
    assert "proactive messages off" not in last_tool_result(llm).content


async def test_model_registers_and_lists_a_follow_up(app: App, llm: FakeLLM) -> None:
    llm.enqueue_tool("proactive_intent", {"what": "ask about the server fix", "why": "committed",
                                          "delay_minutes": 1440})  # fmt: skip
    llm.enqueue_text("Good luck with it!")
    await say(app, "I'll fix that server tomorrow")
    assert "Registered #1" in last_tool_result(llm).content
    pending = await app.feature(ProactiveFeature).store.pending_intents(1)
    assert [(i.what, i.kind, i.confidence) for i in pending] == [
        ("ask about the server fix", "ai", 0.8)
    ]
    llm.enqueue_text("noted")
    await say(app, "anything else?")
    system = llm.requests[-1].system_dynamic
    assert "Proactive quota: 3/3 left today" in system
    assert "Pending follow-ups (1):" in system
    assert "ask about the server fix" in system


async def test_a_chat_cannot_cancel_another_users_intent(app: App, llm: FakeLLM) -> None:
    llm.enqueue_tool("proactive_intent", {"what": "x", "delay_minutes": 60})
    llm.enqueue_text("ok")
    await say(app, "remind me", user="alice")
    llm.enqueue_tool("proactive_cancel", {"id": 1})
    llm.enqueue_text("done")
    await say(app, "cancel follow-up 1", user="mallory")
    result = last_tool_result(llm)
    assert result.is_error
    assert "no pending follow-up #1" in result.content
    assert len(await app.feature(ProactiveFeature).store.pending_intents(1)) == 1
    # Mallory's command can't either, and sees a clear error.
    await say(app, "/cancel 1", user="mallory")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "args",
    [
        {"what": "x"},  # no time
        {"what": "x", "delay_minutes": 5, "at": "2026-01-02T10:00:00+00:00"},  # both
        {"what": "x", "at": "tomorrow"},
        {"what": "x", "at": "2026-01-02T10:00:00"},  # no offset
        {"what": "x", "at": "2025-01-02T10:00:00+00:00"},  # past
        {"what": "", "delay_minutes": 5},
        {"what": "x", "delay_minutes": 5, "confidence": 3},
    ],
)
async def test_bad_intent_arguments_are_tool_errors(
    app: App, llm: FakeLLM, args: dict[str, object]
) -> None:
    llm.enqueue_tool("proactive_intent", args)
    llm.enqueue_text("sorry")
    await say(app, "remind me")
    assert last_tool_result(llm).is_error
    assert await app.feature(ProactiveFeature).store.pending_intents(1) == []


@pytest.mark.parametrize("delay", [600_000.0, 1e305, float("inf")])
async def test_a_delay_beyond_a_year_is_refused_in_words(
    app: App, llm: FakeLLM, delay: float
) -> None:
    llm.enqueue_tool("proactive_intent", {"what": "x", "delay_minutes": delay})
    llm.enqueue_text("sorry")
    await say(app, "remind me in a very long time")
    assert last_tool_result(llm).content == "the time must be within a year"


async def test_admin_tools_are_not_offered_to_users(app: App, llm: FakeLLM) -> None:
    llm.enqueue_text("hi")
    await say(app, "hello")
    names = {t.name for t in llm.requests[-1].tools}
    assert {"proactive_intent", "proactive_cancel", "proactive_list", "proactive_quota",
            "proactive_engage"} <= names  # fmt: skip
    assert not names & {"proactive_scan", "proactive_execute"}


async def test_commands_and_their_bad_input(app: App, channel: MemoryChannel) -> None:
    cases = [
        ("/proactive", "Proactive messages are on"),
        ("/proactive maybe", "Usage: /proactive on|off"),
        ("/proactive off", "Proactive messages are off"),
        ("/proactive", "Proactive messages are off"),
        ("/quiet 25-3", "Hours go from 0 to 23"),
        ("/quiet soon", "Usage: /quiet HH-HH"),
        ("/quiet 7-7", "same hour"),
        ("/quiet 8-7", "fewer than 4 hours a day for follow-ups"),  # 23 h quiet
        ("/quiet 20-17", "fewer than 4 hours a day"),  # 21 h: just over
        ("/quiet 20-16", "Quiet hours set to 20:00–16:00"),  # 20 h: the most
        ("/quiet 23-7", "Quiet hours set to 23:00–07:00"),
        ("/quiet", "Your quiet hours: 23:00–07:00 (UTC)"),
        ("/quiet off", "Quiet hours are off"),
        ("/quiet default", "reset to the default (22:00–08:00)"),
        ("/followups", "You have no pending follow-ups."),
        ("/cancel abc", "Usage: /cancel ID"),
        ("/cancel 42", "You have no pending follow-up #42"),
        ("/why", "I haven't sent you any proactive message yet."),
    ]
    for text, expected in cases:
        await say(app, text)
        assert expected in channel.texts()[-1], (text, channel.texts()[-1])
    user = await app.conversations.get_user(inbound("x").user)
    assert user is not None
    assert user.settings == {"proactive_enabled": False}


async def test_followups_cancel_and_why_after_a_send(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    clock = midday(app)
    llm.enqueue_tool("proactive_intent", {"what": "check the deploy", "why": "user asked",
                                          "delay_minutes": 30, "confidence": 0.9})  # fmt: skip
    llm.enqueue_tool("proactive_intent", {"what": "water plants", "delay_minutes": 90,
                                          "kind": "user_reminder"})  # fmt: skip
    llm.enqueue_text("sure")
    await say(app, "deploying now; remind me to water plants")
    await say(app, "/followups")
    assert "#1 " in channel.texts()[-1]
    assert "#2 " in channel.texts()[-1]
    assert "(reminder): water plants" in channel.texts()[-1]
    await say(app, "/cancel 2")
    assert channel.texts()[-1] == "Cancelled follow-up #2."
    clock.advance(31 * 60)
    llm.enqueue_tool("proactive_decision", {"action": "send", "message": "Did the deploy work?"})
    assert app.feature(ProactiveFeature).engine is not None
    await app.feature(ProactiveFeature).engine.tick()
    assert channel.texts()[-1] == "Did the deploy work?"
    gate = llm.requests[-1]
    assert gate.purpose == "proactive_gate"
    assert "proactive_decision" in {t.name for t in gate.tools}
    await say(app, "/why")
    why = channel.texts()[-1]
    assert '"check the deploy" — because: user asked (confidence 0.90)' in why
    assert "a follow-up I registered #1" in why
    assert "(message #1, " in why  # the id proactive_engage takes


async def test_engagement_is_marked_when_the_user_writes_within_24h(app: App, llm: FakeLLM) -> None:
    clock = midday(app)
    await say(app, "hi")
    llm.enqueue_tool("proactive_intent", {"what": "a", "delay_minutes": 5})
    await say(app, "later")
    clock.advance(6 * 60)
    llm.enqueue_tool("proactive_decision", {"action": "send", "message": "ping"})
    assert app.feature(ProactiveFeature).engine is not None
    await app.feature(ProactiveFeature).engine.tick()
    await say(app, "/why")  # a command is not engagement
    assert await app.feature(ProactiveFeature).log.engagement_rate(1, app.clock.now_ms()) == 0.0
    clock.advance(3600)
    await say(app, "oh thanks!")
    assert await app.feature(ProactiveFeature).log.engagement_rate(1, app.clock.now_ms()) == 1.0
    engaged = await app.vault.fetchone("SELECT engaged, engaged_at FROM proactive_log")
    assert engaged is not None
    assert tuple(engaged) == (1, app.clock.now_ms())


async def test_disabled_engine_registers_no_tools_and_no_background(tmp_path: Path) -> None:
    config, channel = make_config(tmp_path, proactive={"enabled": False}), MemoryChannel()
    async with app_with(config, channel, FakeLLM()) as app:
        assert app.feature(ProactiveFeature).engine is None
        # Other features may run jobs of their own; none is the proactive engine's.
        assert [j for j in app.contributions.jobs if j.__module__.startswith("proactive")] == []
        assert "proactive" in app.commands.names()
        # Nothing can be sent: the commands say so rather than "I may follow up".
        await say(app, "/proactive on")
        assert "switched proactive messages off for now" in channel.texts()[-1]


async def test_admin_tools_scan_execute_and_engage(tmp_path: Path) -> None:
    llm, channel = FakeLLM(), MemoryChannel()
    config = make_config(tmp_path, auth={"admins": ["memory:boss"], "allow": ["memory:*"]})
    clock = ManualClock()
    clock.advance(12 * 3600)
    async with app_with(config, channel, llm, clock=clock) as app:  # fmt: skip
        assert app.feature(ProactiveFeature).engine is not None
        llm.enqueue_tool("proactive_intent", {"what": "later", "delay_minutes": 600})
        llm.enqueue_text("ok")
        await say(app, "remind me much later")
        llm.enqueue_tool("proactive_execute", {"id": 1})
        llm.enqueue_text("no")
        await say(app, "run it now")
        assert last_tool_result(llm).is_error  # not an admin: the tool does not exist for them
        llm.enqueue_tool("proactive_execute", {"id": 1})
        llm.enqueue_text("done")
        await say(app, "run follow-up 1 now", user="boss")
        assert "runs at the next tick" in last_tool_result(llm).content
        llm.enqueue_tool("proactive_decision", {"action": "send", "message": "Now, as asked."})
        assert (await app.feature(ProactiveFeature).engine.tick()).outcomes == {"sent": 1}
        llm.enqueue_tool("proactive_engage", {"id": 1})
        llm.enqueue_text("not yours")
        await say(app, "mark it engaged", user="boss")  # not even an admin engages for others
        assert last_tool_result(llm).is_error
        assert await app.feature(ProactiveFeature).log.engagement_rate(1, clock.now_ms()) == 0.0
        llm.enqueue_tool("proactive_scan", {})
        llm.enqueue_text("scanned")
        await say(app, "scan", user="boss")
        scanned = last_tool_result(llm).content
        assert scanned.startswith("Scan done: 0 dormant")
        llm.enqueue_tool("proactive_execute", {"id": 99})
        llm.enqueue_text("no such")
        await say(app, "run follow-up 99", user="boss")
        # The model acting for an admin is an admin action: audited like /admin fire.
        audited = [
            (e.actor, e.action, e.args, e.outcome, e.result)
            for e in reversed(await app.audit.recent(limit=10))
        ]
        assert audited == [
            ("memory:u1", "tool proactive_execute", {"id": 1}, "refused", "not allowed"),
            ("memory:boss", "tool proactive_execute", {"id": 1}, "ok",
             "Follow-up #1 runs at the next tick (policy checks still apply)."),
            ("memory:boss", "tool proactive_scan", {}, "ok", scanned),
            ("memory:boss", "tool proactive_execute", {"id": 99}, "error",
             "no pending follow-up #99"),
        ]  # fmt: skip


async def test_a_replayed_registration_adds_no_second_follow_up(app: App, llm: FakeLLM) -> None:
    for _ in range(2):  # e.g. the user retried after the model failed later in the turn
        llm.enqueue_tool("proactive_intent", {"what": "ask about the fix", "delay_minutes": 60})
        llm.enqueue_text("ok")
        await say(app, "I'll fix it tomorrow")
    assert "Already registered as #1" in last_tool_result(llm).content
    assert [i.what for i in await app.feature(ProactiveFeature).store.pending_intents(1)] == [
        "ask about the fix"
    ]
    llm.enqueue_tool(
        "proactive_intent",
        {"what": "ask about the fix", "delay_minutes": 60},
    )
    llm.enqueue_text("ok")
    await say(app, "same, from another chat", user="u2")
    assert "Registered #2" in last_tool_result(llm).content  # another user's is their own


async def test_list_shows_pending_check_ins_and_messages_the_model_can_engage(
    app: App, llm: FakeLLM
) -> None:
    clock = midday(app)
    feature = app.feature(ProactiveFeature)
    assert feature.engine is not None
    llm.enqueue_tool("proactive_intent", {"what": "ask about the trip", "delay_minutes": 5})
    llm.enqueue_text("noted")
    await say(app, "I'm off to Porto")
    clock.advance(6 * 60)
    llm.enqueue_tool("proactive_decision", {"action": "send", "message": "How was Porto?"})
    await feature.engine.tick()
    await feature.store.add_trigger(type="unanswered", chat=1, user=1,
                                    context="you asked: did the fix work?", source_key="q1",
                                    execute_at=clock.now_ms() + 3_600_000,
                                    now_ms=clock.now_ms())  # fmt: skip
    llm.enqueue_tool("proactive_list", {})
    llm.enqueue_text("here")
    await say(app, "/why", user="u1")  # a command: not engagement
    await app.router.submit(inbound("what's pending?", user="u1", chat="chat-elsewhere"))
    listing = last_tool_result(llm).content
    assert "No pending follow-ups." in listing
    assert "check-in #1 at" in listing and "(unanswered): you asked: did the fix work?" in listing
    assert "message #1 sent" in listing and "(no reply yet): How was Porto?" in listing
    # Writing in another chat is not engagement; the model may record it when it sees it is.
    assert await feature.log.engagement_rate(1, clock.now_ms()) == 0.0
    llm.enqueue_tool("proactive_engage", {"id": 1})
    llm.enqueue_text("glad you liked it")
    await app.router.submit(inbound("Porto was lovely, thanks for asking!", user="u1",
                                    chat="chat-elsewhere"))  # fmt: skip
    assert "Recorded that the user engaged" in last_tool_result(llm).content
    assert await feature.log.engagement_rate(1, clock.now_ms()) == 1.0
    llm.enqueue_tool("proactive_engage", {"id": 1})
    llm.enqueue_text("already")
    await say(app, "again")
    assert last_tool_result(llm).is_error  # already engaged


async def test_engagement_needs_a_message_in_the_same_chat(app: App, llm: FakeLLM) -> None:
    clock = midday(app)
    feature = app.feature(ProactiveFeature)
    assert feature.engine is not None
    llm.enqueue_tool("proactive_intent", {"what": "a", "delay_minutes": 5})
    await say(app, "later")
    clock.advance(6 * 60)
    llm.enqueue_tool("proactive_decision", {"action": "send", "message": "ping"})
    await feature.engine.tick()
    await app.router.submit(inbound("unrelated", user="u1", chat="chat-other"))
    await app.router.submit(inbound("me too", user="u2", chat="chat-u1"))  # someone else
    assert await feature.log.engagement_rate(1, clock.now_ms()) == 0.0
    clock.advance(25 * 3600)
    await say(app, "sorry, only now")  # the right chat, but after 24 h
    assert await feature.log.engagement_rate(1, clock.now_ms()) == 0.0
