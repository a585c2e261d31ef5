"""The core pipeline through the whole app: dedupe, auth, record, commands and the agent's reply.

These run inbound messages through `App` (a fresh vault, `MemoryChannel`, `FakeLLM`) and look
at what was stored and sent. The router's own behaviour (order per chat, the concurrency
limit, drain, the error notices) is tested with plain steps in `test_router.py`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.errors import ChatUnreachable, ModelRejected, ModelUnavailable, VaultError
from gateway.core.llm import LLMRequest, LLMResponse
from gateway.core.messages import ChatKind
from gateway.turns.router import APOLOGY, MODEL_DOWN
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound


async def user_texts(app: App, chat: str = "c1") -> list[str]:
    rows = await app.vault.fetchall(
        """SELECT m.text FROM messages m JOIN chats c ON c.id = m.chat
           WHERE c.chat_id = ? AND m.role = 'user' ORDER BY m.id""",
        (chat,),
    )
    return [r[0] for r in rows]


async def test_a_chat_is_recorded_and_answered_in_order_while_chats_run_concurrently(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    release = asyncio.Event()
    b_started = asyncio.Event()
    started: list[str] = []

    class Gated(FakeLLM):
        async def complete(self, request: LLMRequest) -> LLMResponse:
            text = request.messages[-1].parts[0].text  # type: ignore[union-attr]
            started.append(text)
            if text == "b1":
                b_started.set()
            if text == "a1":
                await release.wait()
            return await super().complete(request)

    app.agent.llm = gated = Gated()
    gated.default = "r"
    tasks = [app.router.submit(inbound(t, chat=t[0])) for t in ("a1", "a2", "b1", "a3")]
    # b1 (another chat) finishes while a1 is blocked; a2 and a3 wait behind a1.
    await b_started.wait()
    await tasks[2]
    assert "a2" not in started
    release.set()
    await asyncio.gather(*tasks)
    assert [s for s in started if s.startswith("a")] == ["a1", "a2", "a3"]
    assert await user_texts(app, "a") == ["a1", "a2", "a3"]


async def test_redelivered_message_is_handled_once(app: App, channel: MemoryChannel) -> None:
    first = inbound("hi", message_id="42")
    await app.router.submit(first)
    await app.router.submit(inbound("hi", message_id="42"))
    assert len(channel.sent) == 1
    assert await user_texts(app) == ["hi"]


async def test_extra_dedupe_keys_catch_the_same_event_under_another_id(
    app: App, channel: MemoryChannel
) -> None:
    await app.router.submit(replace(inbound("x", message_id="1"), dedupe_keys=("ts:C1:100",)))
    await app.router.submit(replace(inbound("x", message_id="2"), dedupe_keys=("ts:C1:100",)))
    assert len(channel.sent) == 1


async def test_not_allowed_user_gets_no_model_reply_and_one_notice_a_day(
    tmp_path: Path, llm: FakeLLM, channel: MemoryChannel
) -> None:
    config = make_config(tmp_path, auth={"allow": ["memory:friend"]})
    clock = ManualClock()
    async with app_with(config, channel, llm, clock=clock) as app:
        await app.router.submit(inbound("hello", user="stranger"))
        await app.router.submit(inbound("hello again", user="stranger"))
        assert llm.requests == []
        assert len(channel.sent) == 1
        assert "memory:stranger" in channel.sent[0].text
        assert await user_texts(app) == []  # strangers' words are not stored
        clock.advance(24 * 3600)
        await app.router.submit(inbound("next day", user="stranger"))
        assert len(channel.sent) == 2
        await app.router.submit(inbound("hi", user="friend", chat="c2"))
        assert len(llm.requests) == 1


async def test_groups_answer_only_when_addressed_and_strangers_get_silence(
    tmp_path: Path, llm: FakeLLM, channel: MemoryChannel
) -> None:
    config = make_config(tmp_path, auth={"allow": ["memory:friend"]})
    async with app_with(config, channel, llm) as app:
        group = {"kind": ChatKind.GROUP, "chat": "g1"}
        await app.router.submit(inbound("chatter", user="friend", **group))  # type: ignore[arg-type]
        await app.router.submit(inbound("@iris hi", user="stranger", mentioned=True, **group))  # type: ignore[arg-type]
        assert channel.sent == [] and llm.requests == []
        await app.router.submit(inbound("@iris hi", user="friend", mentioned=True, **group))  # type: ignore[arg-type]
        assert len(channel.sent) == 1 and len(llm.requests) == 1


async def test_admins_are_allowed_even_with_an_empty_allow_list(
    tmp_path: Path, llm: FakeLLM, channel: MemoryChannel
) -> None:
    config = make_config(tmp_path, auth={"admins": ["memory:boss"], "allow": []})
    async with app_with(config, channel, llm) as app:
        await app.router.submit(inbound("hi", user="boss"))
        await app.router.submit(inbound("hi", user="other", chat="c2"))
    assert len(llm.requests) == 1


async def test_model_outage_apologises_and_keeps_the_message(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    llm.enqueue_error(ModelUnavailable("model API unavailable (HTTP 529)"))
    await app.router.submit(inbound("are you there?"))
    assert channel.texts() == [MODEL_DOWN.format(when="in a minute")]
    assert await user_texts(app) == ["are you there?"]
    # the failed call is recorded, and the next message works again
    llm.enqueue_text("back")
    await app.router.submit(inbound("now?"))
    assert channel.texts()[-1] == "back"


async def test_unexpected_error_gets_the_fixed_apology_never_the_exception_text(
    app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    llm.enqueue_error(ModelRejected("secret internal detail"))
    await app.router.submit(inbound("hi"))

    def explode(request: LLMRequest) -> LLMResponse:
        raise KeyError("internal-key-name")

    llm.enqueue_fn(explode)
    await app.router.submit(inbound("again"))
    assert channel.texts() == [APOLOGY, APOLOGY]
    assert await user_texts(app) == ["hi", "again"]


async def test_no_model_configured_gives_a_clear_notice_and_commands_still_work(
    tmp_path: Path, channel: MemoryChannel
) -> None:
    async with app_with(make_config(tmp_path), channel, None) as app:
        await app.router.submit(inbound("hello"))
        await app.router.submit(inbound("/help"))
        assert "ANTHROPIC_API_KEY" in channel.texts()[0]
        assert channel.texts()[1].startswith("Commands:")
        assert await user_texts(app) == ["hello", "/help"]


async def test_empty_and_oversized_messages(
    tmp_path: Path, llm: FakeLLM, channel: MemoryChannel
) -> None:
    config = make_config(tmp_path, router={"max_message_chars": 10})
    async with app_with(config, channel, llm) as app:
        await app.router.submit(inbound("   "))
        await app.router.submit(inbound("x" * 11))
        assert llm.requests == []
        assert "I can only read text" in channel.texts()[0]
        assert "too long (11 characters; the limit is 10)" in channel.texts()[1]
        assert await user_texts(app) == ["x" * 11]  # saved, not answered
        # Later turns do not carry it to the model (nor pay for its size): a stand-in does.
        await app.router.submit(inbound("y" * 4000))
        await app.router.submit(inbound("hi there"))
        (request,) = llm.requests
        sent = str(request.messages)
        assert "x" * 11 not in sent and "y" * 20 not in sent
        assert "A message of 11 characters, over the limit of 10" in sent
        assert "hi there" in sent
        await app.router.submit(inbound("/status"))
        tokens = int(channel.texts()[-1].split("messages, ~")[1].split()[0])
        assert tokens < 100  # the stand-ins' size, not the messages' (~1,000 tokens)
        await app.router.submit(inbound("/compact"))
        assert "y" * 20 not in str(llm.requests[-1].messages)  # the summary's request too


async def test_a_turn_cancelled_at_the_drain_deadline_keeps_its_message(
    tmp_path: Path, channel: MemoryChannel
) -> None:
    asked = asyncio.Event()

    class Stuck(FakeLLM):
        async def complete(self, request: LLMRequest) -> LLMResponse:
            asked.set()
            await asyncio.Event().wait()
            raise AssertionError

    config = make_config(tmp_path, router={"drain_timeout_s": 0.01})
    async with app_with(config, channel, Stuck()) as app:
        task = app.router.submit(inbound("stuck"))
        await asked.wait()  # recorded, and now waiting on the model
        await app.router.drain()
        assert task.cancelled()
        assert await user_texts(app) == ["stuck"]
        assert channel.sent == []


async def test_a_failed_recording_does_not_swallow_the_redelivery(
    app: App, llm: FakeLLM, channel: MemoryChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vault.conversations as conversations

    real = conversations.insert_message
    calls = 0

    def flaky(*args: object, **kwargs: object) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise VaultError("disk I/O error")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(conversations, "insert_message", flaky)
    await app.router.submit(inbound("important", message_id="7"))
    assert channel.texts() == [APOLOGY]
    await app.router.submit(inbound("important", message_id="7"))  # the platform redelivers
    assert channel.texts() == [APOLOGY, "ok"]
    assert await user_texts(app) == ["important"]


async def test_writing_again_makes_an_unreachable_chat_reachable(
    app: App, channel: MemoryChannel
) -> None:
    channel.fail_with.append(ChatUnreachable("blocked"))
    await app.router.submit(inbound("hi"))
    query = "SELECT unreachable_ms FROM chats WHERE chat_id = 'c1'"
    assert await app.vault.scalar(query) is not None
    await app.router.submit(inbound("I unblocked you"))
    assert await app.vault.scalar(query) is None
    assert channel.texts() == ["ok"]
