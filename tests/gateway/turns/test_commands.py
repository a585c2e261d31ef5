from __future__ import annotations

from pathlib import Path

from gateway.app.app import App
from gateway.core.llm import TextPart
from gateway.turns.commands import parse_command
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound


def test_parse_command() -> None:
    assert parse_command("/clear") == ("clear", "")
    assert parse_command("/TZ@iris_bot  Europe/Berlin ") == ("tz", "Europe/Berlin")
    assert parse_command("hello /clear") is None
    assert parse_command("//not a command") is None
    assert parse_command("/") is None
    assert parse_command("/path/to/file") is None


async def say(app: App, text: str) -> None:
    await app.router.submit(inbound(text))


def last_request_texts(llm: FakeLLM) -> str:
    request = llm.requests[-1]
    parts = [p.text for m in request.messages for p in m.parts if isinstance(p, TextPart)]
    return request.system_dynamic + "\n" + "\n".join(parts)


async def test_clear_starts_a_fresh_context_but_keeps_the_messages(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    await say(app, "my cat is called Tom")
    await say(app, "/clear")
    assert "fresh conversation" in channel.texts()[-1]
    await say(app, "what is my cat called?")
    assert "Tom" not in last_request_texts(llm)
    stored = await app.vault.scalar("SELECT count(*) FROM messages WHERE text LIKE '%Tom%'")
    assert stored == 1
    assert llm.requests[0].system_stable == llm.requests[-1].system_stable


async def test_compact_replaces_history_with_the_models_summary(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    await say(app, "we are planning a trip to Lisbon in May")
    llm.enqueue_text("User plans a May trip to Lisbon.")
    await say(app, "/compact")
    assert channel.texts()[-1].endswith("User plans a May trip to Lisbon.")
    summary_request = llm.requests[-1]
    assert summary_request.purpose == "compact"
    assert "Lisbon" in summary_request.messages[0].parts[0].text  # type: ignore[union-attr]
    await say(app, "what about hotels?")
    context = last_request_texts(llm)
    assert "Summary of the conversation so far:\nUser plans a May trip to Lisbon." in context
    assert "we are planning a trip" not in context


async def test_compact_with_nothing_to_compact_does_not_call_the_model(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    await say(app, "/compact")
    assert channel.texts() == ["Nothing to compact yet."]
    assert llm.requests == []


async def test_status_tz_memory_and_forget(app: App, llm: FakeLLM, channel: MemoryChannel) -> None:
    user = await app.conversations.get_user(inbound("x").user)
    assert user is None
    await say(app, "/tz Europe/Berlin")
    assert channel.texts()[-1].startswith("Time zone set to Europe/Berlin")
    user = await app.conversations.get_user(inbound("x").user)
    assert user is not None and user.timezone == "Europe/Berlin"
    await app.memories.remember(user.pk, "likes jazz", 0)
    await say(app, "/memory")
    assert "1. likes jazz" in channel.texts()[-1]
    await say(app, "/status")
    status = channel.texts()[-1]
    assert "Model: claude-sonnet-5-5" in status and "Memories: 1" in status
    assert "Europe/Berlin" in status
    await say(app, "/forget 1")
    assert channel.texts()[-1] == "Forgotten: memory 1."
    assert await app.memories.count(user.pk) == 0
    for text in ("likes jazz", "lives in Leipzig"):
        await app.memories.remember(user.pk, text, 0)
    await app.router.submit(inbound("/tz UTC", user="someone-else"))
    other = await app.conversations.get_user(inbound("x", user="someone-else").user)
    assert other is not None
    await app.memories.remember(other.pk, "likes tea", 0)
    await say(app, "/forget all")
    assert channel.texts()[-1] == "Forgotten: all 2 memories."
    assert await app.memories.count(user.pk) == 0
    assert await app.memories.count(other.pk) == 1  # only the asker's own
    await say(app, "/forget ALL")
    assert channel.texts()[-1] == "There was nothing to forget: I remember nothing about you."
    assert llm.requests == []


async def test_bad_command_input_gets_helpful_errors(app: App, channel: MemoryChannel) -> None:
    await say(app, "/tz Mars/Olympus")
    assert "not a time zone I know" in channel.texts()[-1]
    await say(app, "/tz ../../etc/passwd")
    assert "not a time zone I know" in channel.texts()[-1]
    for name in ("Europe/" + "B" * 300, "Europe"):  # a path too long to open; a directory
        await say(app, f"/tz {name}")
        assert "not a time zone I know" in channel.texts()[-1]
    # Files of a zoneinfo folder that are no zone: the host's own zone, a template, a
    # placeholder, and the leap-second (`right/`) and `posix/` copies.
    for name in ("localtime", "posixrules", "Factory", "right/Asia/Tokyo", "posix/Europe/Berlin"):
        await say(app, f"/tz {name}")
        assert "not a time zone I know" in channel.texts()[-1], name
    await say(app, "/forget abc")
    assert channel.texts()[-1].startswith("Usage: /forget N")
    await say(app, "/forget 99")
    assert "no memory number 99" in channel.texts()[-1]
    await say(app, "/frobnicate")
    reply = channel.texts()[-1]
    assert reply.startswith("Unknown command /frobnicate.") and "/clear" in reply


async def test_absurd_numbers_get_a_one_line_answer_never_an_error(
    app: App, channel: MemoryChannel
) -> None:
    huge = "99999999999999999999999"
    cases = [
        (f"/forget {huge}", f"There is no memory number {huge}. See /memory."),
        ("/forget 9223372036854775808", "There is no memory number 9223372036854775808."),
        ("/forget 0", "There is no memory number 0."),
        ("/forget #" + "9" * 500, "There is no memory number " + "9" * 24 + "…. See /memory."),
        ("/forget -1", "Usage: /forget N"),
        ("/forget ²", "Usage: /forget N"),
        ("/forget ١٢", "Usage: /forget N"),
        ("/forget 1.5", "Usage: /forget N"),
        ("/forget 1e3", "Usage: /forget N"),
        (f"/cancel {huge}", f"You have no pending follow-up #{huge}. See /followups."),
        ("/cancel #9223372036854775807", "You have no pending follow-up #9223372036854775807."),
        ("/cancel -3", "Usage: /cancel ID"),
        ("/cancel ²", "Usage: /cancel ID"),
        ("/cancel 0x10", "Usage: /cancel ID"),
        ("/cancel", "Usage: /cancel ID"),
        (f"/quiet {huge}-3", "Usage: /quiet HH-HH"),
        ("/quiet 99-3", "Hours go from 0 to 23"),
    ]
    for text, expected in cases:
        await say(app, text)
        reply = channel.texts()[-1]
        assert expected in reply, (text, reply)
        assert "\n" not in reply and "went wrong" not in reply, (text, reply)


async def test_admin_subcommands_with_absurd_ids(tmp_path: Path, channel: MemoryChannel) -> None:
    config = make_config(tmp_path, auth={"admins": ["memory:boss"], "allow": ["memory:*"]})
    async with app_with(config, channel, FakeLLM()) as app:
        for sub in ("cancel", "fire"):
            await app.router.submit(inbound(f"/admin {sub} {'9' * 40}", user="boss"))
            assert channel.texts()[-1] == f"no follow-up #{'9' * 24}…", sub
            await app.router.submit(inbound(f"/admin {sub} -1", user="boss"))
            assert channel.texts()[-1] == f"Usage: /admin {sub} ID", sub


async def test_commands_are_recorded_but_not_part_of_model_history(app: App, llm: FakeLLM) -> None:
    await say(app, "/help")
    await say(app, "hello")
    assert len(llm.requests) == 1
    assert "Commands:" not in last_request_texts(llm)
    kinds = [r[0] for r in await app.vault.fetchall("SELECT kind FROM messages ORDER BY id")]
    assert kinds == ["command", "command", "chat", "chat"]


async def test_memories_stay_out_of_group_replies(app: App, llm: FakeLLM) -> None:
    from gateway.core.messages import ChatKind

    await app.router.submit(inbound("hello", chat="dm"))
    user = await app.conversations.get_user(inbound("x").user)
    assert user is not None
    await app.memories.remember(user.pk, "salary is 90k", 0)
    await app.router.submit(inbound("what is my salary", chat="dm"))
    assert "salary is 90k" in llm.requests[-1].system_dynamic
    group = inbound("@iris what is my salary", chat="team", kind=ChatKind.GROUP, mentioned=True)
    await app.router.submit(group)
    assert "salary is 90k" not in llm.requests[-1].system_dynamic


async def test_memory_command_lists_nothing_in_a_group(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    from gateway.core.messages import ChatKind

    await app.router.submit(inbound("hello", chat="dm"))
    user = await app.conversations.get_user(inbound("x").user)
    assert user is not None
    await app.memories.remember(user.pk, "interviewing at a competitor", 0)
    await app.router.submit(inbound("/memory", chat="team", kind=ChatKind.GROUP, mentioned=True))
    assert "interviewing" not in channel.texts()[-1]
    assert "direct message" in channel.texts()[-1]
    await app.router.submit(inbound("/memory", chat="dm"))
    assert "1. interviewing at a competitor" in channel.texts()[-1]


async def test_a_lone_surrogate_is_saved_as_a_replacement_character(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    # JSON may carry "\\ud800", which decodes to a str no UTF-8 encoder (SQLite's) takes: the
    # save failed, and a platform that redelivers the batch stopped the whole stream on it.
    llm.enqueue_text("answered")
    await app.router.submit(inbound("lone \ud800 surrogate"))
    assert channel.texts()[-1] == "answered"
    saved = await app.vault.fetchall("SELECT text FROM messages WHERE role = 'user'")
    assert [r[0] for r in saved] == ["lone \ufffd surrogate"]
