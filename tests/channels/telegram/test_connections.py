"""The Telegram channel's connections, against a loopback Bot API (respx has no pools): typing
indicators never take a reply's connection, a typing caller that stops waiting does not cancel
its request, and a send that finds no free connection was not sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

import channels.telegram.sender as telegram_sender
from channels.telegram.channel import TelegramChannel
from channels.telegram.sender import TYPING_CONNECTIONS
from gateway.core.errors import DeliveryTransient
from gateway.core.messages import ChatRef, Outbound

TOKEN = "123456:LOOPBACK"
CHAT = ChatRef(channel="telegram", chat_id="42")


class SlowBotAPI:
    """sendChatAction and sendMessage each wait while their gate is closed."""

    def __init__(self) -> None:
        self.actions_open = asyncio.Event()
        self.sends_open = asyncio.Event()
        self.sends_open.set()
        self.actions_waiting = 0
        self.actions_done = 0
        self.sends_arrived = 0
        self.sent: list[str] = []
        self.changed = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        form = await request.post()
        if method == "sendChatAction":
            await self._note("actions_waiting", 1)
            await self.actions_open.wait()
            await self._note("actions_done", 1)
            return web.json_response({"ok": True, "result": True})
        if method == "sendMessage":
            await self._note("sends_arrived", 1)
            await self.sends_open.wait()
            self.sent.append(str(form["text"]))
            chat = {"id": int(str(form["chat_id"])), "type": "private"}
            result = {"message_id": len(self.sent), "date": 0, "chat": chat}
            return web.json_response({"ok": True, "result": result})
        return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"})

    async def _note(self, field: str, step: int) -> None:
        async with self.changed:
            setattr(self, field, getattr(self, field) + step)
            self.changed.notify_all()

    async def wait_for(self, predicate: object) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), 5)  # type: ignore[arg-type]


@pytest.fixture
async def api() -> AsyncIterator[tuple[SlowBotAPI, str]]:
    fake = SlowBotAPI()
    app = web.Application()
    app.router.add_post("/bot{token}/{method}", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield fake, f"http://127.0.0.1:{port}/bot"
    finally:
        fake.actions_open.set()
        fake.sends_open.set()
        await runner.cleanup()


def reply(text: str) -> Outbound:
    return Outbound(chat=CHAT, text=text, idempotency_key=text)


async def test_busy_typing_indicators_never_hold_up_a_reply(
    api: tuple[SlowBotAPI, str],
) -> None:
    fake, base = api
    async with TelegramChannel(token=TOKEN, base_url=base, send_connections=2) as tg:
        # Every typing connection hangs, and more indicators are asked for than it has.
        typing = [asyncio.create_task(tg.typing(CHAT)) for _ in range(TYPING_CONNECTIONS + 5)]
        await fake.wait_for(lambda: fake.actions_waiting == TYPING_CONNECTIONS)
        skipped = [t for t in typing if t.done()]
        assert len(skipped) == 5  # over budget: skipped at once, not queued
        # Replies still have every one of their connections.
        await asyncio.gather(tg.send(reply("one")), tg.send(reply("two")))
        assert sorted(fake.sent) == ["one", "two"]
        fake.actions_open.set()
        await asyncio.gather(*typing)


async def test_a_cancelled_typing_caller_lets_its_request_finish_and_free_the_connection(
    api: tuple[SlowBotAPI, str],
) -> None:
    fake, base = api
    async with TelegramChannel(token=TOKEN, base_url=base) as tg:
        callers = [asyncio.create_task(tg.typing(CHAT)) for _ in range(TYPING_CONNECTIONS)]
        await fake.wait_for(lambda: fake.actions_waiting == TYPING_CONNECTIONS)
        for caller in callers:  # the replies are ready: the turns stop their indicators
            caller.cancel()
        await asyncio.wait(callers)
        assert all(c.cancelled() for c in callers)
        # The requests were not cut off half way: they still hold the budget...
        await tg.typing(CHAT)  # skipped: no new request
        assert fake.actions_waiting == TYPING_CONNECTIONS
        # ...until they end normally...
        fake.actions_open.set()
        await fake.wait_for(lambda: fake.actions_done == TYPING_CONNECTIONS)
        # ...and give their connections back: a whole budget of indicators works again.
        await asyncio.gather(*(tg.typing(CHAT) for _ in range(TYPING_CONNECTIONS)))
        assert fake.actions_done == 2 * TYPING_CONNECTIONS


async def test_a_send_that_finds_no_free_connection_was_not_sent(
    api: tuple[SlowBotAPI, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, base = api
    monkeypatch.setattr(telegram_sender, "SEND_WAIT_S", 0.0)  # give up at once, no waiting
    async with TelegramChannel(token=TOKEN, base_url=base, send_connections=1) as tg:
        fake.sends_open.clear()
        first = asyncio.create_task(tg.send(reply("first")))
        await fake.wait_for(lambda: fake.sends_arrived == 1)  # it holds the only connection
        with pytest.raises(DeliveryTransient, match="not sent"):
            await tg.send(reply("second"))
        fake.sends_open.set()
        await first
        await tg.send(reply("second"))  # the retry goes through
    assert fake.sent == ["first", "second"]
