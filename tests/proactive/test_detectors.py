"""Passive detectors: dormant users, unanswered questions, engagement drops; idempotency."""

from __future__ import annotations

from pathlib import Path

from gateway.core.messages import ChatKind
from gateway.core.scope import Scope
from gateway.turns.commands import CommandCall
from proactive.commands import ProactiveCommands
from proactive.policy import PolicyConfig
from tests.fakes import inbound
from tests.proactive.support import DAY, HOUR, Harness, harness
from vault.proactive.gate_calls import GateCalls


async def write(h: Harness, user: str, text: str = "hi", *, ago_ms: int = 0) -> None:
    h.clock._now -= ago_ms  # record in the past, then come back
    try:
        await h.user(user, text=text)
    finally:
        h.clock._now += ago_ms


async def reply(h: Harness, chat: int, text: str, *, ago_ms: int) -> None:
    rec = await h.vault.fetchone("SELECT id FROM sessions WHERE chat = ?", (chat,))
    assert rec is not None
    await h.conversations.record_reply(
        session=rec[0], chat=chat, kind="chat", text=text, tokens=1,
        now_ms=h.clock.now_ms() - ago_ms,
    )  # fmt: skip


async def triggers(h: Harness) -> list[tuple[str, int, str]]:
    rows = await h.vault.fetchall("SELECT type, user, status FROM proactive_triggers ORDER BY id")
    return [tuple(r) for r in rows]  # type: ignore[misc]


async def test_dormant_users_get_one_trigger_per_silence(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        await write(h, "quiet", ago_ms=8 * DAY)
        await write(h, "active", ago_ms=2 * DAY)
        await write(h, "optout", ago_ms=9 * DAY)
        optout = await h.vault.scalar("SELECT id FROM users WHERE user_id = 'optout'")
        await h.conversations.update_settings(optout, {"proactive_enabled": False})
        engine = h.engine()
        first = await engine.scan()
        assert first.dormant_user == 1
        assert (await engine.scan()).dormant_user == 0  # idempotent
        quiet = await h.vault.scalar("SELECT id FROM users WHERE user_id = 'quiet'")
        assert await h.store.has_pending_trigger(quiet, "dormant_user")
        context = await h.vault.scalar("SELECT context FROM proactive_triggers")
        assert context == "no message for 8 days"


async def test_group_chats_are_not_nudged(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        h.clock._now -= 8 * DAY
        await h.user("g", chat="group-1", kind=ChatKind.GROUP)
        h.clock._now += 8 * DAY
        assert (await h.engine().scan()).total == 0


async def test_unanswered_question(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        await write(h, "asked", ago_ms=26 * HOUR)
        _, chat = await h.vault.fetchone(  # type: ignore[misc]
            "SELECT u.id, m.chat FROM users u JOIN messages m ON m.user = u.id "
            "WHERE u.user_id = 'asked'"
        )
        await reply(h, chat, "Which port does the server use?", ago_ms=25 * HOUR)
        await write(h, "told", ago_ms=26 * HOUR)
        _, told_chat = await h.vault.fetchone(  # type: ignore[misc]
            "SELECT u.id, m.chat FROM users u JOIN messages m ON m.user = u.id "
            "WHERE u.user_id = 'told'"
        )
        await reply(h, told_chat, "Done, the server is up.", ago_ms=25 * HOUR)
        await write(h, "answered", ago_ms=26 * HOUR)
        _, answered_chat = await h.vault.fetchone(  # type: ignore[misc]
            "SELECT u.id, m.chat FROM users u JOIN messages m ON m.user = u.id "
            "WHERE u.user_id = 'answered'"
        )
        await reply(h, answered_chat, "Which port?", ago_ms=25 * HOUR)
        await write(h, "answered", text="8080", ago_ms=24 * HOUR)
        found = await h.engine().scan()
        assert found.unanswered == 1
        context = await h.vault.scalar("SELECT context FROM proactive_triggers")
        assert context == "you asked: Which port does the server use?"
        assert (await h.engine().scan()).unanswered == 0


async def test_engagement_drop(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        for week in range(1, 5):
            for day in range(3):
                await write(h, "dropper", ago_ms=week * 7 * DAY + day * DAY + HOUR)
                await write(h, "steady", ago_ms=week * 7 * DAY + day * DAY + HOUR)
        for day in range(3):
            await write(h, "steady", ago_ms=day * DAY + HOUR)
        found = await h.engine().scan()
        assert found.engagement_drop == 1
        dropper = await h.vault.scalar("SELECT id FROM users WHERE user_id = 'dropper'")
        drops = [t for t in await triggers(h) if t[0] == "engagement_drop"]
        assert drops == [("engagement_drop", dropper, "pending")]


async def test_never_two_open_triggers_of_one_type_per_user(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        user, chat = await h.user("u1")
        now = h.clock.now_ms()
        values = {"chat": chat, "user": user, "context": "x", "execute_at": now, "now_ms": now}
        assert await h.store.add_trigger(type="external", source_key="a", **values)
        assert await h.store.add_trigger(type="external", source_key="b", **values) is None
        assert await h.store.add_trigger(type="dormant_user", source_key="a", **values)


async def test_trigger_goes_through_policy_and_gate(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        await write(h, "quiet", ago_ms=8 * DAY)
        engine = h.engine()
        await engine.scan()
        h.send_decision("Haven't heard from you in a while — all good?")
        report = await engine.tick()
        assert report.outcomes == {"sent": 1}
        prompt = h.llm.requests[0].messages[0].parts[0].text  # type: ignore[union-attr]
        assert "gone quiet" in prompt
        assert await triggers(h) == [("dormant_user", 1, "sent")]


async def test_why_explains_a_trigger(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        await write(h, "quiet", ago_ms=8 * DAY)
        engine = h.engine()
        await engine.scan()
        h.send_decision("All good?")
        await engine.tick()
        commands = {c.name: c for c in ProactiveCommands(
            conversations=h.conversations, store=h.store, plog=h.plog, policy=PolicyConfig(),
            calls=GateCalls(h.vault),
        ).commands()}  # fmt: skip
        msg = inbound("/why", user="quiet")
        scope = Scope(user=msg.user, chat=msg.chat, user_pk=1, chat_pk=1, session_pk=1,
                      message_pk=1, text="/why", now_ms=h.clock.now_ms())  # fmt: skip
        text = await commands["why"].handler(
            CommandCall(name="why", args="", scope=scope, hint=lambda c: f"/{c}")
        )
        assert "an automatic check (dormant user) #1: no message for 8 days" in text
        assert "Outcome: sent." in text
