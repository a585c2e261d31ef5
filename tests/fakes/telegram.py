"""A fake Telegram Bot API on respx (python-telegram-bot speaks httpx, which respx intercepts).

`FakeBotAPI` answers getMe, getUpdates (a queue of batches; an empty queue holds the long poll
open until something is queued, like the real server), sendMessage (with scripted failures:
429, can't-parse, 403, ...; or `send_errors`, httpx errors the client meets before the request
reaches the API: a pool timeout, a refused connect, a read timeout), sendChatAction,
setMyCommands, setWebhook, deleteWebhook and answerCallbackQuery (kept in `answers`).
`sent` holds every sendMessage that succeeded, as the form fields PTB sent (an inline keyboard
is the JSON text of `reply_markup`). `callback_update` is a press on one of the bot's buttons.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from typing import Any
from urllib.parse import parse_qsl

import httpx
import respx

TOKEN = "123456:TEST-token"
BASE = "https://telegram.test/bot"
BOT_ID = 123456
BOT_USERNAME = "iris_bot"


def ok(result: Any) -> httpx.Response:
    return httpx.Response(200, json={"ok": True, "result": result})


def error(status: int, description: str, **parameters: Any) -> httpx.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return httpx.Response(status, json=body)


def fields(request: httpx.Request) -> dict[str, str]:
    return dict(parse_qsl(request.content.decode()))


_update_ids = itertools.count(1000)
_message_ids = itertools.count(1)


def message_update(
    text: str,
    *,
    user_id: int = 42,
    chat_id: int | None = None,
    chat_type: str = "private",
    entities: list[dict[str, Any]] | None = None,
    reply_to_bot: bool = False,
    thread_id: int | None = None,
    from_bot: bool = False,
    update_id: int | None = None,
    message_id: int | None = None,
) -> dict[str, Any]:
    """A Bot API `Update` with a message, as JSON."""
    chat_id = chat_id if chat_id is not None else user_id
    message: dict[str, Any] = {
        "message_id": message_id if message_id is not None else next(_message_ids),
        "date": 1_767_225_600,
        "chat": {"id": chat_id, "type": chat_type},
        "from": {"id": user_id, "is_bot": from_bot, "first_name": "Ada"},
        "text": text,
    }
    if entities:
        message["entities"] = entities
    if reply_to_bot:
        message["reply_to_message"] = {
            "message_id": 1,
            "date": 1_767_225_500,
            "chat": {"id": chat_id, "type": chat_type},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Iris", "username": BOT_USERNAME},
            "text": "earlier answer",
        }
    if thread_id is not None:
        message["message_thread_id"] = thread_id
        message["is_topic_message"] = True
    return {
        "update_id": update_id if update_id is not None else next(_update_ids),
        "message": message,
    }


_query_ids = itertools.count(9_000_000)


def callback_update(
    data: str,
    *,
    user_id: int = 42,
    chat_id: int | None = None,
    chat_type: str = "private",
    message_id: int = 5000,
    from_bot: bool = False,
    query_id: str | None = None,
) -> dict[str, Any]:
    """A Bot API `Update` with a callback query: a press on a button of the bot's message."""
    chat_id = chat_id if chat_id is not None else user_id
    query: dict[str, Any] = {
        "id": query_id if query_id is not None else str(next(_query_ids)),
        "from": {"id": user_id, "is_bot": from_bot, "first_name": "Ada"},
        "chat_instance": f"instance-{chat_id}",
        "message": {
            "message_id": message_id,
            "date": 1_767_225_700,
            "chat": {"id": chat_id, "type": chat_type},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Iris", "username": BOT_USERNAME},
            "text": "Possibly useful here:",
        },
        "data": data,
    }
    return {"update_id": next(_update_ids), "callback_query": query}


def buttons_of(sent: dict[str, str]) -> list[list[dict[str, str]]]:
    """The inline keyboard of a sent message: rows of {text, callback_data}."""
    markup = sent.get("reply_markup")
    return json.loads(markup)["inline_keyboard"] if markup else []


def mention(text: str, handle: str = f"@{BOT_USERNAME}") -> list[dict[str, Any]]:
    at = text.index(handle)
    return [{"type": "mention", "offset": at, "length": len(handle)}]


class FakeBotAPI:
    def __init__(self, router: respx.MockRouter, *, base: str = BASE, token: str = TOKEN) -> None:
        self.updates: deque[list[dict[str, Any]]] = deque()
        self.send_script: deque[httpx.Response | None] = deque()  # None = succeed
        self.send_errors: deque[Exception] = deque()  # raised in the client, one per send
        self.sent: list[dict[str, str]] = []
        self.attempts: list[dict[str, str]] = []
        self.calls: list[str] = []
        self.polls = 0
        self.commands: list[dict[str, str]] = []
        self.me_response: httpx.Response | None = None
        self.updates_response: httpx.Response | None = None
        self.updates_errors: deque[httpx.Response] = deque()  # answered once each, first
        self.offsets: list[str | None] = []  # the offset each getUpdates confirmed up to
        self.answers: list[dict[str, str]] = []  # answerCallbackQuery calls
        self._changed = asyncio.Condition()
        self._ids = itertools.count(5000)
        prefix = f"{base}{token}/"
        router.route(url__startswith=prefix).mock(side_effect=self._handle)
        self._prefix = prefix

    def queue_updates(self, *updates: dict[str, Any]) -> None:
        self.updates.append(list(updates))
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_sent(self, count: int) -> list[dict[str, str]]:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.sent) >= count), 5)
        return self.sent

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        method = str(request.url).removeprefix(self._prefix)
        if method == "sendMessage" and self.send_errors:
            raise self.send_errors.popleft()
        self.calls.append(method)
        try:
            return await self._answer(method, request)
        finally:
            await self._notify()

    async def _answer(self, method: str, request: httpx.Request) -> httpx.Response:
        if method == "getMe":
            return self.me_response or ok(
                {"id": BOT_ID, "is_bot": True, "first_name": "Iris", "username": BOT_USERNAME}
            )
        if method == "getUpdates":
            self.offsets.append(fields(request).get("offset"))
            return await self._get_updates()
        if method == "sendMessage":
            data = fields(request)
            self.attempts.append(data)
            scripted = self.send_script.popleft() if self.send_script else None
            if scripted is not None:
                return scripted
            self.sent.append(data)
            chat = {"id": int(data["chat_id"]), "type": "private"}
            return ok({"message_id": next(self._ids), "date": 1_767_225_700, "chat": chat})
        if method == "setMyCommands":
            self.commands = json.loads(fields(request)["commands"])
            return ok(True)
        if method == "answerCallbackQuery":
            self.answers.append(fields(request))
            return ok(True)
        if method in ("sendChatAction", "setWebhook", "deleteWebhook"):
            return ok(True)
        return error(404, "Not Found")

    async def wait_answers(self, count: int) -> list[dict[str, str]]:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.answers) >= count), 5)
        return self.answers

    async def wait_polls(self, count: int) -> None:
        """Until `count` getUpdates calls arrived: the batches before the last are handed over."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.polls >= count), 5)

    async def _get_updates(self) -> httpx.Response:
        self.polls += 1
        await self._notify()
        if self.updates_errors:
            return self.updates_errors.popleft()
        if self.updates_response is not None:
            return self.updates_response
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self.updates))
        return httpx.Response(
            200, content=json.dumps({"ok": True, "result": self.updates.popleft()})
        )
