"""A loopback Telegram Bot API over real sockets, for tests that run `iris run` as a process
(respx only sees the test's own process). It keeps Telegram's polling contract: `getUpdates`
returns the updates from `offset` on and holds the poll open until one arrives; an offset
confirms everything before it. Every `sendMessage` is kept with the message it replies to.
With `conflict` set, `getUpdates` answers 409 as Telegram does while another client polls the
same token (counted in `conflicts`); `polls` counts the answered ones.

    async with BotAPIServer() as api:
        api.add_message(chat_id=7, text="hi")      # queued like a user writing
        base_url = api.base_url                    # `[telegram] base_url`
        await api.wait(lambda: len(api.sent) >= 1)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from aiohttp import web

POLL_HOLD_S = 0.5  # long polls end this soon without news, so a killed client is noticed
CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)


@dataclass(frozen=True, slots=True)
class Sent:
    chat_id: int
    text: str
    reply_to: int | None
    message_id: int


class BotAPIServer:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.sent: list[Sent] = []
        self.confirmed = 0  # the highest offset a getUpdates carried
        self.handed_out = 0  # getUpdates answers that carried updates
        self.polls = 0  # getUpdates requests taken (not answered 409)
        self.conflict = False  # answer getUpdates 409: another poller holds the token
        self.conflicts = 0
        self.changed = asyncio.Condition()
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._sent_ids = itertools.count(100_000)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/bot"
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def add_message(self, *, chat_id: int, text: str) -> int:
        """Queue a private message from user `chat_id`; its message id."""
        message_id = next(self._message_ids)
        self.updates.append(
            {
                "update_id": next(self._update_ids),
                "message": {
                    "message_id": message_id,
                    "date": int(time.time()),
                    "chat": {"id": chat_id, "type": "private"},
                    "from": {"id": chat_id, "is_bot": False, "first_name": f"u{chat_id}"},
                    "text": text,
                },
            }
        )
        asyncio.get_running_loop().create_task(self._notify())
        return message_id

    async def wait(self, done: Callable[[], bool]) -> None:
        """Until `done()` holds; wrap in `asyncio.timeout` for a bound."""
        async with self.changed:
            await self.changed.wait_for(done)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        fields = await _fields(request)
        if method == "getUpdates" and self.conflict:
            self.conflicts += 1
            await self._notify()
            return web.json_response({"ok": False, "error_code": 409, "description": CONFLICT},
                                     status=409)  # fmt: skip
        try:
            return web.json_response({"ok": True, "result": await self._answer(method, fields)})
        finally:
            await self._notify()

    async def _answer(self, method: str, fields: dict[str, Any]) -> Any:
        if method == "getMe":
            return {"id": 1, "is_bot": True, "first_name": "Iris", "username": "iris_bot"}
        if method == "getUpdates":
            return await self._get_updates(int(fields.get("offset") or 0))
        if method == "sendMessage":
            reply = fields.get("reply_parameters")
            reply_to = json.loads(reply)["message_id"] if reply else None
            sent = Sent(int(fields["chat_id"]), str(fields["text"]), reply_to, next(self._sent_ids))
            self.sent.append(sent)
            chat = {"id": sent.chat_id, "type": "private"}
            return {"message_id": sent.message_id, "date": int(time.time()), "chat": chat}
        return True  # deleteWebhook, setMyCommands, sendChatAction

    async def _get_updates(self, offset: int) -> list[dict[str, Any]]:
        self.confirmed = max(self.confirmed, offset)
        self.polls += 1
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(self._news), POLL_HOLD_S)
            except TimeoutError:
                return []
        batch = [u for u in self.updates if u["update_id"] >= self.confirmed][:100]
        self.handed_out += 1
        return batch

    def _news(self) -> bool:
        return any(u["update_id"] >= self.confirmed for u in self.updates)


async def _fields(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        data = await request.json()
        return dict(data) if isinstance(data, dict) else {}
    return dict(await request.post())
