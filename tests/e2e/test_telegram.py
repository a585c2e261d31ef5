"""Telegram end to end: update in through the faked Bot API -> App (router, auth, FakeLLM) ->
reply out through the real adapter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import respx

from channels.telegram import TelegramChannel
from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.llm import LLMRequest, LLMResponse, TextPart
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM, Inbox
from tests.fakes.telegram import BASE, TOKEN, FakeBotAPI, error, mention, message_update

ALLOWED = 42
STRANGER = 99
ADMIN = 7
GROUP = -100500


@asynccontextmanager
async def serving(
    tmp_path: Path,
    llm: FakeLLM,
    clock: ManualClock | None = None,
    auth: dict[str, object] | None = None,
) -> AsyncIterator[tuple[App, FakeBotAPI]]:
    """The app running with a polling Telegram channel; leaving drains every turn."""
    config = make_config(tmp_path, auth=auth or {"allow": [f"telegram:{ALLOWED}"]})
    with respx.mock(assert_all_called=False) as router:
        api = FakeBotAPI(router)
        channel = TelegramChannel(token=TOKEN, base_url=BASE)
        async with (
            app_with(config, channel, llm, clock) as app,
            app_serving(app, channel.started),
        ):
            yield app, api


async def test_dm_gets_a_formatted_model_reply(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("**Hello** Ada <3")
    async with serving(tmp_path, llm) as (_, api):
        api.queue_updates(message_update("hi there", user_id=ALLOWED))
        (reply,) = await api.wait_sent(1)
    assert reply["chat_id"] == str(ALLOWED)
    assert reply["text"] == "<b>Hello</b> Ada &lt;3"
    assert "hi there" in str(llm.requests[0].messages)
    menu = {c["command"]: c["description"] for c in api.commands}
    assert menu["clear"] == "start a fresh conversation"  # the registry's user commands
    assert "followups" in menu  # proactive commands too: the menu is built after all wiring
    assert "admin" not in menu
    # A reply ready within the typing delay is not announced (tests/gateway/turns/test_typing.py
    # has the slow case; tests/channels/telegram the sendChatAction call itself).
    assert "sendChatAction" not in api.calls


async def test_redelivered_update_is_answered_once(tmp_path: Path) -> None:
    llm = FakeLLM()
    update = message_update("once", user_id=ALLOWED)
    async with serving(tmp_path, llm) as (_, api):
        api.queue_updates(update)
        await api.wait_sent(1)
        polls = api.polls
        api.queue_updates(update)  # e.g. after a crash before the offset was confirmed
        await api.wait_polls(polls + 1)
    assert len(api.sent) == 1
    assert len(llm.requests) == 1


async def test_stranger_in_dm_gets_one_notice_and_no_model_reply(tmp_path: Path) -> None:
    llm = FakeLLM()
    async with serving(tmp_path, llm) as (_, api):
        api.queue_updates(
            message_update("let me in", user_id=STRANGER),
            message_update("please", user_id=STRANGER),
        )
        (notice,) = await api.wait_sent(1)
    assert f"telegram:{STRANGER}" in notice["text"]
    assert len(api.sent) == 1  # the second message got silence: one notice a day
    assert llm.requests == []


async def test_groups_answer_only_allowed_users_who_address_the_bot(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("answer")
    text = "@iris_bot what time is it"
    stranger = message_update(
        text, user_id=STRANGER, chat_id=GROUP, chat_type="supergroup", entities=mention(text)
    )
    chatter = message_update(
        "just chatting", user_id=ALLOWED, chat_id=GROUP, chat_type="supergroup"
    )
    asked = message_update(
        text, user_id=ALLOWED, chat_id=GROUP, chat_type="supergroup", entities=mention(text)
    )
    async with serving(tmp_path, llm) as (_, api):
        # One chat is handled in order, so the reply to `asked` proves the others are done.
        api.queue_updates(stranger, chatter, asked)
        (reply,) = await api.wait_sent(1)
    assert reply["text"] == "answer"
    assert str(asked["message"]["message_id"]) in reply["reply_parameters"]
    assert len(api.sent) == 1
    assert len(llm.requests) == 1
    assert "what time is it" in str(llm.requests[0].messages)


async def test_group_command_addressed_to_the_bot_runs(tmp_path: Path) -> None:
    llm = FakeLLM()
    text = "/clear@iris_bot"
    entities = [{"type": "bot_command", "offset": 0, "length": len(text)}]
    update = message_update(
        text, user_id=ALLOWED, chat_id=GROUP, chat_type="group", entities=entities
    )
    async with serving(tmp_path, llm) as (_, api):
        api.queue_updates(update)
        (reply,) = await api.wait_sent(1)
    assert reply["chat_id"] == str(GROUP)
    assert llm.requests == []  # a command, not a model turn


class SignallingClock(ManualClock):
    def __init__(self) -> None:
        super().__init__()
        self.slept = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.slept.set()
        await super().sleep(seconds)


async def test_failed_poll_is_restarted_by_the_supervisor_and_shown_in_health(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, auth={"allow": [f"telegram:{ALLOWED}"]})
    clock = SignallingClock()
    with respx.mock(assert_all_called=False) as router:
        api = FakeBotAPI(router)
        api.updates_errors.append(error(502, "Bad Gateway"))
        channel = TelegramChannel(token=TOKEN, base_url=BASE)
        async with app_with(config, channel, FakeLLM(), clock=clock) as app:
            stop = asyncio.Event()
            task = asyncio.create_task(app.serve(stop))
            await asyncio.wait_for(clock.slept.wait(), 5)  # the supervisor's backoff
            health = channel.health()
            assert not health.connected
            assert "NetworkError" in health.detail
            clock.advance(1)
            api.queue_updates(message_update("after the outage", user_id=ALLOWED))
            await api.wait_sent(1)
            assert channel.health().connected
            stop.set()
            await asyncio.wait_for(task, 10)
    assert api.calls.count("getMe") == 1  # the restart reuses the checked identity


async def test_stalled_polling_shows_in_health() -> None:
    now = [1_000_000]
    channel = TelegramChannel(token=TOKEN, base_url=BASE, now_ms=lambda: now[0])
    with respx.mock(assert_all_called=False) as router:
        api = FakeBotAPI(router)
        task = asyncio.create_task(channel.run(Inbox()))
        await asyncio.wait_for(channel.started.wait(), 5)
        await api.wait_polls(1)
        assert channel.health().connected
        now[0] += 10 * 60 * 1000  # no poll came back for ten minutes
        health = channel.health()
        assert not health.connected
        assert health.detail == "polling stalled"
        task.cancel()
        await asyncio.wait([task])
    await channel.__aexit__(None, None, None)


async def test_message_without_text_gets_a_clear_request_for_text(tmp_path: Path) -> None:
    llm = FakeLLM()
    sticker = message_update("unused", user_id=ALLOWED)
    del sticker["message"]["text"]
    async with serving(tmp_path, llm) as (_, api):
        api.queue_updates(sticker)
        (reply,) = await api.wait_sent(1)
    assert "I can only read text" in reply["text"]
    assert llm.requests == []


async def test_webhook_mode_through_the_http_server(tmp_path: Path) -> None:
    config = make_config(
        tmp_path, auth={"allow": [f"telegram:{ALLOWED}"]}, http={"enabled": True, "port": 0}
    )
    llm = FakeLLM().enqueue_text("hooked")
    with respx.mock(assert_all_called=False) as router:
        api = FakeBotAPI(router)
        channel = TelegramChannel(
            token=TOKEN,
            base_url=BASE,
            mode="webhook",
            webhook_url="https://iris.example/telegram/webhook",
            webhook_secret="s3cret",
        )
        async with app_with(config, channel, llm) as app:
            stop = asyncio.Event()
            task = asyncio.create_task(app.serve(stop))
            await asyncio.wait_for(channel.started.wait(), 5)
            assert app.http is not None
            url = f"http://127.0.0.1:{app.http.port}/telegram/webhook"
            body = json.dumps(message_update("via webhook", user_id=ALLOWED))
            async with aiohttp.ClientSession() as session:
                headers = {
                    "X-Telegram-Bot-Api-Secret-Token": "s3cret",
                    "Content-Type": "application/json",
                }
                async with session.post(url, data=body, headers=headers) as response:
                    assert response.status == 200
                (reply,) = await api.wait_sent(1)
                async with session.get(f"http://127.0.0.1:{app.http.port}/healthz") as response:
                    health = await response.json()
            stop.set()
            await asyncio.wait_for(task, 10)
    assert reply["text"] == "hooked"
    assert "getUpdates" not in api.calls
    assert health["channels"]["telegram"]["connected"] is True


async def test_user_who_blocked_the_bot_marks_the_chat_unreachable_without_retries(
    tmp_path: Path,
) -> None:
    llm = FakeLLM()
    async with serving(tmp_path, llm) as (app, api):
        api.send_script.append(error(403, "Forbidden: bot was blocked by the user"))
        api.queue_updates(message_update("hi", user_id=ALLOWED))
        await api.wait_polls(2)  # the update was handed over
        await app.router.drain()
        unreachable = await app.vault.scalar(
            "SELECT unreachable_ms FROM chats WHERE channel = 'telegram' AND chat_id = ?",
            (str(ALLOWED),),
        )
    assert unreachable is not None
    assert api.sent == []
    assert len(api.attempts) == 1  # a permanent failure: never retried


class WatchingClock(ManualClock):
    """A manual clock that lets a test wait until someone sleeps for a given time."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []
        self.changed = asyncio.Condition()

    async def sleep(self, seconds: float) -> None:
        async with self.changed:
            self.sleeps.append(seconds)
            self.changed.notify_all()
        await super().sleep(seconds)

    async def sleep_until(self, when_ms: int) -> None:
        """Recorded as the seconds from now: a wait handed to the background resend counts."""
        async with self.changed:
            self.sleeps.append((when_ms - self.now_ms()) / 1000)
            self.changed.notify_all()
        await super().sleep_until(when_ms)

    async def wait_for_sleep(self, seconds: float) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: seconds in self.sleeps), 5)


async def test_rate_limited_reply_waits_retry_after_then_is_delivered(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("patience")
    clock = WatchingClock()
    async with serving(tmp_path, llm, clock) as (_, api):
        api.send_script.append(error(429, "Too Many Requests: retry after 7", retry_after=7))
        api.queue_updates(message_update("hi", user_id=ALLOWED))
        # Delivery honours Telegram's retry_after (in the background: the turn does not wait).
        await clock.wait_for_sleep(7.0)
        assert api.sent == []
        clock.advance(7)
        (reply,) = await api.wait_sent(1)
    assert reply["text"] == "patience"
    assert len(api.attempts) == 2


class GatedLLM:
    """Answers "slow" messages only once `gate` is set; everything else at once."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        # The request carries history too: the latest marker in it is the current message.
        text = str(request.messages)
        word = "slow" if text.rfind("slow one") > text.rfind("fast") else "fast"
        if word == "slow":
            await self.gate.wait()
        return LLMResponse(parts=(TextPart(f"re {word}"),), stop_reason="end_turn", model="x")


async def test_chats_run_concurrently_and_each_chat_in_order(tmp_path: Path) -> None:
    config = make_config(tmp_path, auth={"allow": ["telegram:*"]})
    llm = GatedLLM()
    with respx.mock(assert_all_called=False) as router:
        api = FakeBotAPI(router)
        channel = TelegramChannel(token=TOKEN, base_url=BASE)
        async with app_with(config, channel, llm) as app:
            stop = asyncio.Event()
            task = asyncio.create_task(app.serve(stop))
            await asyncio.wait_for(channel.started.wait(), 5)
            api.queue_updates(
                message_update("slow one", user_id=1),
                message_update("fast after slow", user_id=1),
                message_update("fast other chat", user_id=2),
            )
            (first,) = await api.wait_sent(1)
            assert (first["chat_id"], first["text"]) == ("2", "re fast")  # not stuck behind chat 1
            llm.gate.set()
            await api.wait_sent(3)
            stop.set()
            await asyncio.wait_for(task, 10)
    chat1 = [m["text"] for m in api.sent if m["chat_id"] == "1"]
    assert chat1 == ["re slow", "re fast"]


async def test_admin_commands_only_for_admins(tmp_path: Path) -> None:
    auth = {"allow": [f"telegram:{ALLOWED}"], "admins": [f"telegram:{ADMIN}"]}
    async with serving(tmp_path, FakeLLM(), auth=auth) as (app, api):
        api.queue_updates(message_update("/admin stats", user_id=ALLOWED))
        (refused,) = await api.wait_sent(1)
        api.queue_updates(message_update("/admin stats", user_id=ADMIN))
        _, stats = await api.wait_sent(2)
        entries = await app.audit.recent()
    assert "not allowed" in refused["text"]
    assert "Last 24h" in stats["text"]
    assert [(e.actor, e.outcome) for e in reversed(entries)] == [
        (f"telegram:{ALLOWED}", "refused"),
        (f"telegram:{ADMIN}", "ok"),
    ]
