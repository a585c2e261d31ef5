"""How long a subscription event takes to arrive: webhook and server-sent events, end to end.

The whole app (instant model, vault on disk, its HTTP server on 127.0.0.1) with one webhook
subscription pointed at a loopback receiver and one `sse` subscription read by a client over
HTTP. Each round a user writes a message that matches both (the finder finds their memory);
the clock starts when the message is submitted and stops when the receiver has the POST (its
signature verified) or the SSE client has read the event. Prints median, p95 and p99.

    python bench/subscriptions.py --messages 300
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web

from bench.common import InstantModel, peak_rss_mib, percentile, reference_ms
from bench.router import NullChannel
from gateway.app.app import App
from gateway.app.config import Config, Secrets, Settings
from gateway.core.clock import SystemClock
from gateway.core.messages import ChatRef, Inbound, UserRef
from gateway.subscriptions.feature import SubscriptionsFeature

TOKEN = "bench-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def line(name: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return (
        f"{name}: n={len(ms)} median {percentile(ms, 50):.1f} ms, p95 {percentile(ms, 95):.1f} ms,"
        f" p99 {percentile(ms, 99):.1f} ms, max {ms[-1]:.1f} ms"
    )


async def main(messages: int) -> None:
    folder = Path(tempfile.mkdtemp())
    settings = Settings(
        vault={"path": str(folder / "iris.db")},
        auth={"allow": ["bench:*"]},
        http={"enabled": True, "port": 0},
        context={"retrieval": "lexical"},
    )
    config = Config(settings=settings, secrets=Secrets({"IRIS_API_TOKEN": TOKEN}), source=None)
    arrived: dict[str, float] = {}
    changed, opened = asyncio.Event(), asyncio.Event()
    secret = [""]
    bad = [0]

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        want = "sha256=" + hmac.new(secret[0].encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, request.headers["X-Iris-Signature"]):
            bad[0] += 1
        arrived.setdefault("hook:" + json.loads(body)["suggestion"]["trigger"]["source"],
                           time.perf_counter())  # fmt: skip
        changed.set()
        return web.Response()

    receiver = web.Application()
    receiver.router.add_post("/hook", hook)
    runner = web.AppRunner(receiver, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hook_url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"

    app = App(config=config, channels=[NullChannel()], clock=SystemClock(),
              llm_override=InstantModel(), use_llm_override=True)  # fmt: skip
    async with app, aiohttp.ClientSession() as http:
        assert app.http is not None
        base = f"http://127.0.0.1:{app.http.port}"
        feature = app.feature(SubscriptionsFeature)
        pattern: dict[str, Any] = {"patterns": [{"type": "topic", "pattern": "deploy billing"}],
                                   "min_relevance": 0.1, "cooldown_seconds": 0}  # fmt: skip
        async with http.post(
            f"{base}/context/subscriptions",
            headers=AUTH,
            json={**pattern, "callback": "webhook", "url": hook_url},
        ) as res:
            secret[0] = (await res.json())["secret"]
        async with http.post(
            f"{base}/context/subscriptions", headers=AUTH, json={**pattern, "callback": "sse"}
        ) as res:
            sse_id = (await res.json())["id"]

        def message(text: str, n: int) -> Inbound:
            return Inbound(chat=ChatRef(channel="bench", chat_id="u1"),
                           user=UserRef(channel="bench", user_id="u1"), text=text,
                           message_id=f"m{n}")  # fmt: skip

        await app.router.submit(message("hello", 0))
        pk = await app.vault.scalar("SELECT id FROM users WHERE user_id = 'u1'")
        await app.memories.remember(pk, "The deploy runbook for billing is in the ops wiki", 0)

        async def read_stream() -> None:
            url = f"{base}/context/stream?subscription={sse_id}"
            async with http.get(url, headers=AUTH, timeout=aiohttp.ClientTimeout()) as res:
                opened.set()
                async for raw in res.content:
                    text = raw.decode()
                    if text.startswith("data: "):
                        source = json.loads(text[6:])["suggestion"]["trigger"]["source"]
                        arrived.setdefault("sse:" + source, time.perf_counter())
                        changed.set()

        started: dict[str, float] = {}
        async with asyncio.TaskGroup() as tg:
            job = tg.create_task(feature.webhooks.run())
            reader = tg.create_task(read_stream())
            await opened.wait()
            for n in range(1, messages + 1):
                before = len(arrived)
                t0 = time.perf_counter()
                await app.router.submit(message(f"how do I deploy billing, try {n}", n))
                msg_pk = await app.vault.scalar("SELECT max(id) FROM messages WHERE role = 'user'")
                started[f"message:{msg_pk}"] = t0
                while len(arrived) < before + 2:  # both the webhook and the stream have it
                    changed.clear()
                    await asyncio.wait_for(changed.wait(), 10)
            job.cancel()
            reader.cancel()
    await runner.cleanup()
    hooks = [arrived[f"hook:{k}"] - t for k, t in started.items() if f"hook:{k}" in arrived]
    sses = [arrived[f"sse:{k}"] - t for k, t in started.items() if f"sse:{k}" in arrived]
    print(f"messages {messages}, load {os.getloadavg()[0]:.2f}, reference {reference_ms():.0f} ms")
    print(line("webhook delivery", hooks) + f" (bad signatures: {bad[0]})")
    print(line("SSE delivery", sses))
    print(f"missing: webhook {messages - len(hooks)}, sse {messages - len(sses)}")
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=300)
    asyncio.run(main(parser.parse_args().messages))
