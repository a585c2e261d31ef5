"""Telegram end-to-end benchmark: many users -> loopback fake Bot API -> real adapter -> App.

A small aiohttp server on 127.0.0.1 plays the Bot API (getMe, getUpdates long polling,
sendMessage, sendChatAction, ...). The real `TelegramChannel` polls it and the real `App`
(vault on a temp file, router, auth, delivery) answers with a zero-latency model, so the
figures are the gateway's own overhead: translation, dedupe and records in SQLite, outbox,
HTTP both ways. Latency runs from the moment an update becomes available to getUpdates to
the moment its reply reaches sendMessage (replies within a chat arrive in order).

    python bench/telegram_e2e.py --users 200 --messages 5           # burst: throughput
    python bench/telegram_e2e.py --users 50 --messages 10 --rate 100 # paced: latency
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import InstantModel, peak_rss_mib, percentile
from channels.telegram import TelegramChannel
from gateway.app.app import App
from gateway.app.config import Config, Secrets, Settings

TOKEN = "123456:BENCH"
BOT = {"id": 123456, "is_bot": True, "first_name": "Iris", "username": "iris_bot"}


class FakeBotAPI:
    def __init__(self) -> None:
        self.pending: deque[dict[str, Any]] = deque()
        self.available = asyncio.Event()
        self.sent_at: dict[int, list[float]] = defaultdict(list)
        self.queued_at: dict[int, list[float]] = defaultdict(list)
        self.replies = 0
        self.all_done = asyncio.Event()
        self.expected = 0
        self._update_id = 0

    def queue(self, chat_id: int, text: str) -> None:
        self._update_id += 1
        now = time.perf_counter()
        self.queued_at[chat_id].append(now)
        user = {"id": chat_id, "is_bot": False, "first_name": f"user{chat_id}"}
        message = {
            "message_id": self._update_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": user,
            "text": text,
        }
        self.pending.append({"update_id": self._update_id, "message": message})
        self.available.set()

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method == "getMe":
            return web.json_response({"ok": True, "result": BOT})
        if method == "getUpdates":
            return await self._get_updates()
        if method == "sendMessage":
            data = dict(parse_qsl((await request.read()).decode()))
            chat_id = int(data["chat_id"])
            self.sent_at[chat_id].append(time.perf_counter())
            self.replies += 1
            if self.replies >= self.expected:
                self.all_done.set()
            result = {
                "message_id": self.replies,
                "date": 0,
                "chat": {"id": chat_id, "type": "private"},
            }
            return web.json_response({"ok": True, "result": result})
        return web.json_response({"ok": True, "result": True})

    async def _get_updates(self) -> web.Response:
        if not self.pending:
            self.available.clear()
            with contextlib.suppress(TimeoutError):  # an empty long poll, like the real API
                await asyncio.wait_for(self.available.wait(), 5)
        batch = [self.pending.popleft() for _ in range(min(100, len(self.pending)))]
        return web.Response(
            text=json.dumps({"ok": True, "result": batch}), content_type="application/json"
        )


async def inject(api: FakeBotAPI, users: int, messages: int, rate: float) -> None:
    order = [(u, m) for m in range(messages) for u in range(users)]
    interval = 1 / rate if rate > 0 else 0.0
    start = time.perf_counter()
    for i, (user, m) in enumerate(order):
        if interval:
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        api.queue(10_000 + user, f"message {m} from {user}")


async def main(users: int, messages: int, rate: float) -> None:
    api = FakeBotAPI()
    api.expected = users * messages
    server = web.Application()
    server.router.add_post("/bot{token}/{method}", api.handle)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            vault={"path": str(Path(tmp) / "bench.db")},  # type: ignore[arg-type]
            auth={"allow": ["telegram:*"]},  # type: ignore[arg-type]
        )
        config = Config(settings=settings, secrets=Secrets({}), source=None)
        channel = TelegramChannel(token=TOKEN, base_url=f"http://127.0.0.1:{port}/bot")
        async with App(
            config=config,
            channels=[channel],
            llm_override=InstantModel(),
            use_llm_override=True,
        ) as app:
            stop = asyncio.Event()
            serving = asyncio.create_task(app.serve(stop))
            await asyncio.wait_for(channel.started.wait(), 10)
            start = time.perf_counter()
            await inject(api, users, messages, rate)
            await asyncio.wait_for(api.all_done.wait(), 600)
            elapsed = time.perf_counter() - start
            stop.set()
            await serving
    await runner.cleanup()
    latencies = [
        (sent - queued) * 1000
        for chat, sent_times in api.sent_at.items()
        for sent, queued in zip(sent_times, api.queued_at[chat], strict=False)
    ]
    mode = f"paced at {rate:g}/s" if rate else "burst"
    print(f"telegram e2e ({mode}): {users} users x {messages} messages = {api.replies} replies")
    print(f"  throughput   {api.replies / elapsed:8.1f} msg/s  ({elapsed:.2f} s)")
    print(f"  latency p50  {statistics.median(latencies):8.1f} ms")
    print(f"  latency p99  {percentile(latencies, 99):8.1f} ms")
    print(f"  peak RSS     {peak_rss_mib():8.1f} MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5, help="messages per user")
    parser.add_argument("--rate", type=float, default=0.0, help="messages/s; 0 = all at once")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.users, args.messages, args.rate))
