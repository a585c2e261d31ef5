"""The outside world of `bench/replicas.py` on one loopback aiohttp server: the Telegram Bot
API, the Slack Web API and the model, each under a per-replica prefix (`/r<i>/bot…`,
`/r<i>/api/…`, `/r<i>/v1/messages`) so every call is attributed to the replica that made it.

The ledger keeps what the bench judges: every reply sent (replica, chat, text, time) and every
`getUpdates` poll. The model echoes the last user text (`echo: n17`), after `delay_s`, and
answers the proactive gate with `[SKIP]`, so a reminder goes out as its plain text
(`Reminder: p3`). `getUpdates` behaves like Telegram with two pollers on one token: while one
replica's long poll is open, another replica's poll gets 409 Conflict.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

# The echo of the last user text: several texts joined by blank lines when earlier messages of
# the chat have no reply in the history (theirs was uncertain); the reply answers the last one.
# A replayed message answered a minute or more after it was sent starts with a note.
LATE = r"(?:\(Answering your message from [^\n]*\)\n\n)?"
ECHO = re.compile(LATE + r"echo: (?:n\d+\n\n)*n(\d+)")
REMINDER = re.compile(r"Reminder: p(\d+)")
POLL_HOLD_S = 0.5
BOT = {"id": 1, "is_bot": True, "first_name": "Iris", "username": "iris_bot"}


@dataclass(frozen=True, slots=True)
class Reply:
    at: float  # time.monotonic()
    replica: int
    chat: str  # telegram:<id> or slack:<channel>
    text: str


@dataclass
class Ledger:
    replies: list[Reply] = field(default_factory=list)
    polls: list[tuple[float, int, bool]] = field(default_factory=list)  # (at, replica, ok)
    model_calls: Counter[int] = field(default_factory=Counter)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait(self, done: Any, timeout_s: float) -> bool:
        """Until `done()` holds (True) or `timeout_s` passes (False)."""
        try:
            async with asyncio.timeout(timeout_s), self.changed:
                await self.changed.wait_for(done)
        except TimeoutError:
            return False
        return True

    def answers(self) -> dict[int, list[Reply]]:
        """Message number -> the replies that answered it, in the order they were sent."""
        found: dict[int, list[Reply]] = defaultdict(list)
        for reply in self.replies:
            if m := ECHO.fullmatch(reply.text):
                found[int(m.group(1))].append(reply)
        return found

    def reminders(self) -> Counter[int]:
        return Counter(int(m.group(1)) for r in self.replies if (m := REMINDER.fullmatch(r.text)))


class World:
    """The fakes. `url(i)` is replica i's root for all three services."""

    def __init__(self, *, model_delay_s: float) -> None:
        self.ledger = Ledger()
        self.model_delay_s = model_delay_s
        self.conflicts = 0
        self._open_poll: dict[int, int] = {}  # replica -> open long polls
        self._sent_ids = itertools.count(1000)
        self._runner: web.AppRunner | None = None
        self.root = ""

    def url(self, replica: int) -> str:
        return f"{self.root}/r{replica}"

    async def start(self) -> None:
        app = web.Application(client_max_size=4 * 1024 * 1024, middlewares=[_client_gone])
        app.router.add_post(r"/r{replica:\d+}/bot{token}/{method}", self._telegram)
        app.router.add_post(r"/r{replica:\d+}/api/{method}", self._slack)
        app.router.add_post(r"/r{replica:\d+}/v1/messages", self._model)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.root = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _record(self, replica: int, chat: str, text: str) -> None:
        self.ledger.replies.append(Reply(time.monotonic(), replica, chat, text))
        await self.ledger.notify()

    async def _telegram(self, request: web.Request) -> web.Response:
        replica, method = int(request.match_info["replica"]), request.match_info["method"]
        if request.content_type == "application/json":
            fields: dict[str, Any] = await request.json()
        else:
            fields = dict(parse_qsl((await request.read()).decode()))
        if method == "getMe":
            return _ok(BOT)
        if method == "getUpdates":
            return await self._poll(replica)
        if method == "sendMessage":
            chat_id = int(fields["chat_id"])
            await self._record(replica, f"telegram:{chat_id}", str(fields.get("text", "")))
            chat = {"id": chat_id, "type": "private"}
            return _ok({"message_id": next(self._sent_ids), "date": int(time.time()), "chat": chat})
        return _ok(True)  # setWebhook, deleteWebhook, setMyCommands, sendChatAction, ...

    async def _poll(self, replica: int) -> web.Response:
        if any(n for other, n in self._open_poll.items() if other != replica):
            self.conflicts += 1
            self.ledger.polls.append((time.monotonic(), replica, False))
            await self.ledger.notify()
            description = "Conflict: terminated by other getUpdates request"
            body = {"ok": False, "error_code": 409, "description": description}
            return web.json_response(body, status=409)
        self.ledger.polls.append((time.monotonic(), replica, True))
        await self.ledger.notify()
        self._open_poll[replica] = self._open_poll.get(replica, 0) + 1
        try:
            await asyncio.sleep(POLL_HOLD_S)  # a long poll with no news
        finally:
            self._open_poll[replica] -= 1
        return _ok([])

    async def _slack(self, request: web.Request) -> web.Response:
        replica, method = int(request.match_info["replica"]), request.match_info["method"]
        raw = await request.read()
        if request.content_type == "application/json":
            payload: dict[str, Any] = json.loads(raw or b"{}")
        else:
            payload = dict(parse_qsl(raw.decode()))
        if method == "auth.test":
            return web.json_response(
                {"ok": True, "user_id": "UBOT", "bot_id": "BBOT", "user": "iris", "team": "T1"}
            )
        if method == "chat.postMessage":
            channel = str(payload.get("channel"))
            await self._record(replica, f"slack:{channel}", str(payload.get("text", "")))
            ts = f"{time.time():.6f}"
            return web.json_response({"ok": True, "channel": channel, "ts": ts})
        return web.json_response({"ok": True})

    async def _model(self, request: web.Request) -> web.Response:
        self.ledger.model_calls[int(request.match_info["replica"])] += 1
        body = await request.json()
        if self.model_delay_s:
            await asyncio.sleep(self.model_delay_s)
        tools = {t.get("name") for t in body.get("tools") or ()}
        text = "[SKIP]" if "proactive_decision" in tools else f"echo: {_last_text(body)}"
        return web.json_response(
            {
                "id": f"msg_{next(self._sent_ids)}",
                "type": "message",
                "role": "assistant",
                "model": "echo",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        )


@web.middleware
async def _client_gone(request: web.Request, handler: Any) -> web.StreamResponse:
    """A replica killed while it sent its request: nobody reads the answer."""
    try:
        response: web.StreamResponse = await handler(request)
    except ConnectionResetError:
        return web.Response(status=499)
    return response


def _last_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    texts = [part.get("text", "") for part in content if part.get("type") == "text"]
    return texts[-1] if texts else ""


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})
