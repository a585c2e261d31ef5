"""What the subscription tests share: the whole app serving its admin API on 127.0.0.1, a
loopback webhook receiver that checks signatures, and a minimal SSE reader."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway.app.app import App
from gateway.app.config import Config, Secrets
from gateway.core.clock import ManualClock
from gateway.subscriptions.feature import SubscriptionsFeature
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel

TOKEN = "sub-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config_for(tmp_path: Path, **sections: dict[str, object]) -> Config:
    # The test receivers listen on 127.0.0.1: a private address, refused by default.
    sections["subscriptions"] = {"webhook_private_addresses": True,
                                 **sections.get("subscriptions", {})}  # fmt: skip
    base = make_config(
        tmp_path,
        http={"enabled": True, "port": 0},
        context={"retrieval": "lexical"},
        **sections,
    )
    return Config(settings=base.settings, secrets=Secrets({"IRIS_API_TOKEN": TOKEN}), source=None)


@dataclass
class Served:
    app: App
    http: aiohttp.ClientSession
    base: str
    channel: MemoryChannel
    llm: FakeLLM
    clock: ManualClock

    @property
    def feature(self) -> SubscriptionsFeature:
        return self.app.feature(SubscriptionsFeature)

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body))
        headers = {**AUTH, **kw.pop("headers", {})}
        async with self.http.request(
            method, self.base + path, data=data, headers=headers, **kw
        ) as res:
            text = await res.text()
            return res.status, json.loads(text) if text else None


@asynccontextmanager
async def served(tmp_path: Path, **sections: dict[str, object]) -> AsyncIterator[Served]:
    clock, channel, llm = ManualClock(), MemoryChannel(), FakeLLM()
    async with app_with(config_for(tmp_path, **sections), channel, llm, clock) as app:
        assert app.http is not None
        async with aiohttp.ClientSession() as http:
            yield Served(app, http, f"http://127.0.0.1:{app.http.port}", channel, llm, clock)


@dataclass
class Receiver:
    """A webhook endpoint on 127.0.0.1: answers `statuses` in turn (then 200), keeps every
    request with whether its signature verified under `secret`."""

    secret: str = ""
    statuses: list[int] = field(default_factory=list)
    got: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        signature = request.headers.get("X-Iris-Signature", "")
        self.got.append(
            {
                "verified": hmac.compare_digest(expected, signature),
                "key": request.headers.get("X-Iris-Idempotency-Key"),
                "body": json.loads(body),
            }
        )
        self.arrived.set()
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200)


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    found.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield found
    finally:
        await runner.cleanup()


async def read_sse(response: aiohttp.ClientResponse, count: int) -> list[tuple[str, Any]]:
    """The next `count` events (id, data) of an open event stream; comments are skipped."""
    events: list[tuple[str, Any]] = []
    event_id, data = "", ""
    while len(events) < count:
        raw = await response.content.readline()
        if not raw:
            raise AssertionError("the stream ended")
        line = raw.decode().rstrip("\n")
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and data:
            events.append((event_id, json.loads(data)))
            event_id, data = "", ""
    return events
