"""A fake Slack Web API on 127.0.0.1 (slack_sdk's async client speaks aiohttp, so respx can't
see it), plus helpers to sign requests into our `/slack/events` route like Slack does.

`FakeSlackAPI` answers `auth.test` (or a scripted error), `chat.postMessage` (recording each
post; `rate_limit(n)` answers the next n posts with 429 + Retry-After) and a `/respond/<id>`
endpoint that stands in for slash commands' response_url. `action_body` is the interactivity
request of a click on a button of a posted message (`buttons_of` lists a post's buttons).

Socket Mode: `apps.connections.open` hands out the `/ws` socket; every connection is kept in
`sockets` and every ack in `acks`. Like Slack, an envelope whose socket ends before it was
acked is delivered again (`retry_attempt` + 1) on an open socket, at once or once one opens
(`redelivered` counts them); an envelope pushed while no socket is open waits for one.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode

from aiohttp import web

BOT_TOKEN = "xoxb-test-token"
SIGNING_SECRET = "test-signing-secret"
BOT_USER = "UBOT"
BOT_ID = "BBOT"


class FakeSlackAPI:
    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.rate_limit_after = 0  # posts that go through before the 429s start
        self.ephemerals: list[dict[str, Any]] = []  # chat.postEphemeral payloads
        self.responses: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.auth_error: str | None = None
        self.rate_limited = 0
        self.retry_after = "0"
        self.post_error: str | None = None
        self.changed = asyncio.Condition()
        self.url = ""
        self.acks: list[dict[str, Any]] = []
        self.sockets: list[web.WebSocketResponse] = []
        self.ended: list[web.WebSocketResponse] = []  # sockets whose connection is over
        # envelope id -> (the socket it went to, or None while it waits for one; the envelope)
        self.unacked: dict[str, tuple[web.WebSocketResponse | None, dict[str, Any]]] = {}
        self.redelivered = 0

    def rate_limit(self, times: int, retry_after: str = "0", *, after: int = 0) -> None:
        """Answer `times` posts with 429, once `after` more posts went through."""
        self.rate_limited, self.retry_after, self.rate_limit_after = times, retry_after, after

    async def wait_for(self, predicate: Any) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), 5)

    async def _payload(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if request.content_type == "application/json":
            loaded: dict[str, Any] = json.loads(raw or b"{}")
            return loaded
        return dict(parse_qsl(raw.decode()))

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        self.calls.append(method)
        try:
            return await self._answer(method, await self._payload(request))
        finally:
            async with self.changed:
                self.changed.notify_all()

    async def _answer(self, method: str, payload: dict[str, Any]) -> web.Response:
        if method == "auth.test":
            if self.auth_error:
                return web.json_response({"ok": False, "error": self.auth_error})
            return web.json_response(
                {"ok": True, "user_id": BOT_USER, "bot_id": BOT_ID, "user": "iris", "team": "T1"}
            )
        if method == "chat.postMessage":
            if self.rate_limit_after > 0:
                self.rate_limit_after -= 1
            elif self.rate_limited > 0:
                self.rate_limited -= 1
                return web.json_response(
                    {"ok": False, "error": "ratelimited"},
                    status=429,
                    headers={"Retry-After": self.retry_after},
                )
            if self.post_error:
                return web.json_response({"ok": False, "error": self.post_error})
            self.posts.append(payload)
            ts = f"1767225700.{len(self.posts):06d}"
            return web.json_response({"ok": True, "channel": payload.get("channel"), "ts": ts})
        if method == "chat.postEphemeral":
            self.ephemerals.append(payload)
            return web.json_response({"ok": True, "message_ts": "1767225700.999999"})
        if method == "apps.connections.open":
            return web.json_response({"ok": True, "url": self.url.replace("http", "ws") + "/ws"})
        return web.json_response({"ok": False, "error": "unknown_method"}, status=404)

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        """Socket Mode: say hello, then record every envelope ack the client sends."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1})
        await self._redeliver()
        async with self.changed:
            self.changed.notify_all()
        async for message in ws:
            ack = json.loads(message.data)
            self.acks.append(ack)
            self.unacked.pop(str(ack.get("envelope_id")), None)
            async with self.changed:
                self.changed.notify_all()
        self.ended.append(ws)
        await self._redeliver()
        async with self.changed:
            self.changed.notify_all()
        return ws

    def open_sockets(self) -> list[web.WebSocketResponse]:
        return [ws for ws in self.sockets if ws not in self.ended and not ws.closed]

    async def _redeliver(self) -> None:
        """Envelopes left unacked by an ended socket go to the newest open one, if any."""
        live = self.open_sockets()
        if not live:
            return
        for ws, envelope in list(self.unacked.values()):
            if ws is None:  # never delivered: no socket was open
                await self._send(live[-1], envelope)
            elif ws in self.ended or ws.closed:
                again = envelope | {"retry_attempt": int(envelope.get("retry_attempt", 0)) + 1,
                                    "retry_reason": "timeout"}  # fmt: skip
                self.redelivered += 1
                await self._send(live[-1], again)

    async def _deliver(self, envelope: dict[str, Any]) -> None:
        """To the newest open socket, or held until one opens."""
        live = self.open_sockets()
        await self._send(live[-1] if live else None, envelope)

    async def _send(self, ws: web.WebSocketResponse | None, envelope: dict[str, Any]) -> None:
        """To `ws`, or held until a socket opens when it is None."""
        self.unacked[str(envelope["envelope_id"])] = (ws, envelope)
        if ws is not None:
            await ws.send_json(envelope)

    async def push_event(self, envelope_id: str, body: str) -> None:
        envelope = {
            "envelope_id": envelope_id,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "payload": json.loads(body),
        }
        await self._deliver(envelope)

    async def push_interactive(self, envelope_id: str, form_body: str) -> None:
        """A button click over the socket: the payload of `action_body`'s form, enveloped."""
        (payload,) = parse_qs(form_body)["payload"]
        envelope = {
            "envelope_id": envelope_id,
            "type": "interactive",
            "accepts_response_payload": True,
            "payload": json.loads(payload),
        }
        await self._deliver(envelope)

    async def respond(self, request: web.Request) -> web.Response:
        self.responses.append(json.loads(await request.read()))
        async with self.changed:
            self.changed.notify_all()
        return web.Response(text="ok")


@asynccontextmanager
async def running_fake_slack() -> AsyncIterator[FakeSlackAPI]:
    fake = FakeSlackAPI()
    app = web.Application()
    app.router.add_post("/api/{method}", fake.handle)
    app.router.add_post("/respond/{id}", fake.respond)
    app.router.add_get("/ws", fake.socket)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        for ws in fake.sockets:
            await ws.close()
        await runner.cleanup()


def signed_headers(
    body: str, *, secret: str = SIGNING_SECRET, at: float | None = None, content_type: str
) -> dict[str, str]:
    ts = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "x-slack-request-timestamp": ts,
        "x-slack-signature": f"v0={digest}",
        "content-type": content_type,
    }


def event_body(event: dict[str, Any], event_id: str = "Ev1") -> str:
    return json.dumps(
        {
            "token": "legacy",
            "team_id": "T1",
            "api_app_id": "A1",
            "type": "event_callback",
            "event_id": event_id,
            "event_time": 1767225600,
            "event": event,
        }
    )


def dm_event(text: str, *, user: str = "U1", ts: str = "1767225600.000100") -> dict[str, Any]:
    return {
        "type": "message",
        "channel": "D1",
        "channel_type": "im",
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
    }


def command_body(text: str, *, response_url: str, user: str = "U1", channel: str = "D1") -> str:
    return urlencode(
        {
            "command": "/iris",
            "text": text,
            "user_id": user,
            "channel_id": channel,
            "team_id": "T1",
            "trigger_id": f"trig-{time.monotonic_ns()}",
            "response_url": response_url,
        }
    )


def buttons_of(post: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a chat.postMessage payload, in order."""
    blocks = post.get("blocks") or []
    if isinstance(blocks, str):  # form-encoded posts carry blocks as JSON text
        blocks = json.loads(blocks)
    return [e for b in blocks if b.get("type") == "actions" for e in b["elements"]]


def action_body(
    button: dict[str, Any],
    *,
    user: str = "U1",
    channel: str = "D1",
    message_ts: str = "1767225700.000002",
    thread_ts: str | None = None,
) -> str:
    """The form-encoded `block_actions` request Slack sends when `button` is clicked."""
    container: dict[str, Any] = {"type": "message", "message_ts": message_ts,
                                 "channel_id": channel, "is_ephemeral": False}  # fmt: skip
    if thread_ts:
        container["thread_ts"] = thread_ts
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": "ada", "team_id": "T1"},
        "api_app_id": "A1",
        "token": "legacy",
        "container": container,
        "trigger_id": f"trig-{time.monotonic_ns()}",
        "team": {"id": "T1", "domain": "example"},
        "channel": {"id": channel, "name": "directmessage"},
        "message": {"type": "message", "ts": message_ts, "text": "Possibly useful here:"},
        "actions": [
            {
                "type": "button",
                "action_id": button["action_id"],
                "block_id": "b1",
                "text": button["text"],
                "value": button["value"],
                "action_ts": "1767225800.000100",
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)})
