"""Telegram bursts and a soak: is every message answered exactly once, and does memory level off?

The real app (vault on a temp file, router, delivery, the Telegram channel as `iris run`
builds it from config) polls a loopback fake Bot API (aiohttp on 127.0.0.1) that speaks
getMe, getUpdates (long polling), sendMessage and sendChatAction. The model echoes the id
of the message it answers after `--model-ms`, so the typing indicator is in flight when the
reply is ready (the fake API answers sendChatAction after `--action-ms`, like a loaded Bot
API); `--rate-limit-every N` answers every Nth sendMessage with a 429 and `--retry-after` s.

First `--rounds` bursts of `--burst` messages over `--chats` chats, all queued at once; then a
paced soak of `--soak` messages at `--rate` msg/s. Each phase checks that every message was
answered exactly once and in order within its chat, and prints throughput, p50/p99 latency
(update available to getUpdates -> its reply at sendMessage) and the errors (delivery results
other than sent, warnings logged, 429s served). The process's RSS is sampled every
`--rss-every` answered messages from the start; `--tracemalloc FRAMES` also prints where
Python memory grew from a quarter of the soak to its end (much slower; its own traces count
in the RSS).

    python bench/telegram_burst.py                                   # 3 x 2,000, soak 20,000
    python bench/telegram_burst.py --rounds 0 --soak 4000 --rate 20 --tracemalloc 1
    python bench/telegram_burst.py --rate-limit-every 50 --retry-after 30

The bench's own bookkeeping is a few bytes per message (arrays indexed by message id), so
the RSS curve is the gateway's.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import percentile
from gateway.app.app import App
from gateway.app.channels import build_channels
from gateway.app.config import Config, Secrets, Settings
from gateway.core.llm import LLMRequest, LLMResponse, TextPart

TOKEN = "123456:BURST"
BOT = {"id": 123456, "is_bot": True, "first_name": "Iris", "username": "iris_bot"}
FIRST_CHAT = 10_000
MESSAGE_ID = re.compile(r"\bm(\d+)\b")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


class EchoModel:
    """The LLM port: answers `re m<id>` for the message `m<id>`, after `delay_s`."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        text = " ".join(p.text for p in request.messages[-1].parts if isinstance(p, TextPart))
        found = MESSAGE_ID.findall(text)
        return LLMResponse(
            parts=(TextPart(f"re m{found[-1] if found else '?'}"),),
            stop_reason="end_turn",
            model="echo",
            input_tokens=1,
            output_tokens=1,
        )


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.first) < 5:
            self.first.append(f"{record.name}: {record.getMessage()[:160]}")


class FakeBotAPI:
    """The Bot API on loopback. Bookkeeping is per message id, in flat arrays."""

    def __init__(self, *, action_s: float, rate_limit_every: int, retry_after: int) -> None:
        self.action_s = action_s
        self.rate_limit_every = rate_limit_every
        self.retry_after = retry_after
        self.pending: list[dict[str, Any]] = []
        self.available = asyncio.Event()
        self.queued_at = array.array("d")  # by message id - 1
        self.chat_of = array.array("l")
        self.answers = bytearray()  # replies seen per message id (saturating)
        self.latency_ms = array.array("d")
        self.last_in_chat: dict[int, int] = {}
        self.out_of_order = 0
        self.unknown_replies = 0
        self.unique = 0
        self.sends = 0
        self.actions = 0
        self.rate_limited = 0
        self.target = 0
        self.reached = asyncio.Event()
        self.on_answer: list[Any] = []  # callbacks(unique) for the RSS curve

    def queue(self, chat_id: int) -> None:
        self.queued_at.append(time.perf_counter())
        self.chat_of.append(chat_id)
        self.answers.append(0)
        mid = len(self.queued_at)
        user = {"id": chat_id, "is_bot": False, "first_name": "u"}
        message = {
            "message_id": mid,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": user,
            "text": f"m{mid}",
        }
        self.pending.append({"update_id": mid, "message": message})
        self.available.set()

    def expect(self, unique: int) -> None:
        self.target = unique
        self.reached.clear()
        if self.unique >= unique:
            self.reached.set()

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method == "getUpdates":
            return await self._get_updates()
        if method == "sendMessage":
            return self._send_message(dict(parse_qsl((await request.read()).decode())))
        if method == "sendChatAction":
            self.actions += 1
            if self.action_s:
                await asyncio.sleep(self.action_s)
            return web.json_response({"ok": True, "result": True})
        if method == "getMe":
            return web.json_response({"ok": True, "result": BOT})
        return web.json_response({"ok": True, "result": True})

    async def _get_updates(self) -> web.Response:
        if not self.pending:
            self.available.clear()
            with contextlib.suppress(TimeoutError):  # an empty long poll, like the real API
                await asyncio.wait_for(self.available.wait(), 5)
        batch, self.pending = self.pending[:100], self.pending[100:]
        return web.Response(
            text=json.dumps({"ok": True, "result": batch}), content_type="application/json"
        )

    def _send_message(self, data: dict[str, str]) -> web.Response:
        self.sends += 1
        if self.rate_limit_every and self.sends % self.rate_limit_every == 0:
            self.rate_limited += 1
            body = {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {self.retry_after}",
                "parameters": {"retry_after": self.retry_after},
            }
            return web.json_response(body, status=429)
        chat_id = int(data["chat_id"])
        found = MESSAGE_ID.search(data.get("text", ""))
        mid = int(found.group(1)) if found else 0
        if not 0 < mid <= len(self.answers) or self.chat_of[mid - 1] != chat_id:
            self.unknown_replies += 1
        else:
            seen = self.answers[mid - 1]
            self.answers[mid - 1] = min(255, seen + 1)
            if seen == 0:
                self.unique += 1
                self.latency_ms.append((time.perf_counter() - self.queued_at[mid - 1]) * 1000)
                if mid < self.last_in_chat.get(chat_id, 0):
                    self.out_of_order += 1
                self.last_in_chat[chat_id] = mid
                for callback in self.on_answer:
                    callback(self.unique)
                if self.unique >= self.target:
                    self.reached.set()
        result = {"message_id": self.sends, "date": 0, "chat": {"id": chat_id, "type": "private"}}
        return web.json_response({"ok": True, "result": result})

    def tally(self, first: int, last: int) -> tuple[int, int]:
        """(unanswered, answered more than once) among message ids first..last."""
        window = self.answers[first - 1 : last]
        return window.count(0), len(window) - window.count(0) - window.count(1)


class Phase:
    def __init__(self, api: FakeBotAPI, name: str) -> None:
        self.api, self.name = api, name
        self.first = len(api.queued_at) + 1
        self.latency_from = len(api.latency_ms)
        self.started = time.perf_counter()

    def report(self, app: App, warnings: Warnings, timed_out: bool) -> dict[str, Any]:
        api = self.api
        elapsed = time.perf_counter() - self.started
        last = len(api.queued_at)
        unanswered, duplicated = api.tally(self.first, last)
        latencies = list(api.latency_ms[self.latency_from :])
        count = last - self.first + 1
        line = {
            "phase": self.name,
            "messages": count,
            "answered": count - unanswered,
            "unanswered": unanswered,
            "duplicated": duplicated,
            "throughput": (count - unanswered) / elapsed if elapsed else 0.0,
            "p50_ms": statistics.median(latencies) if latencies else float("nan"),
            "p99_ms": percentile(latencies, 99),
            "timed_out": timed_out,
        }
        print(
            f"{self.name:>9}: {line['answered']:>6}/{count} answered, "
            f"{unanswered} missing, {duplicated} twice, {line['throughput']:7.1f} msg/s, "
            f"p50 {line['p50_ms']:8.1f} ms, p99 {line['p99_ms']:8.1f} ms"
            + ("  (TIMED OUT)" if timed_out else "")
        )
        return line


async def burst(api: FakeBotAPI, chats: int, size: int) -> None:
    for i in range(size):
        api.queue(FIRST_CHAT + i % chats)


async def paced(api: FakeBotAPI, chats: int, size: int, rate: float) -> None:
    start = time.perf_counter()
    sent = 0
    while sent < size:
        due = min(size, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            api.queue(FIRST_CHAT + sent % chats)
            sent += 1
        await asyncio.sleep(0.01)


async def run_phase(
    api: FakeBotAPI, app: App, warnings: Warnings, name: str, load: Any, size: int, wait_s: float
) -> dict[str, Any]:
    phase = Phase(api, name)
    api.expect(api.unique + size)
    await load
    timed_out = False
    try:
        await asyncio.wait_for(api.reached.wait(), wait_s)
    except TimeoutError:
        timed_out = True
    return phase.report(app, warnings, timed_out)


def print_errors(app: App, api: FakeBotAPI, warnings: Warnings) -> None:
    results = Counter({r: int(v) for (_, r), v in app.metrics.delivery_attempts.values.items()})
    deferred = Counter({r: int(v) for (_, r), v in app.metrics.delivery_deferred.values.items()})
    outcomes = Counter({s: int(v) for (_, _, s), v in app.metrics.outbound.values.items()})
    print(f"  delivery attempts by result: {dict(sorted(results.items()))}")
    print(f"  outbox outcomes: {dict(sorted(outcomes.items()))}; put off: {dict(deferred)}")
    print(
        f"  fake API: {api.sends} sendMessage, {api.actions} sendChatAction, "
        f"{api.rate_limited} answered 429, {api.unknown_replies} replies to nothing, "
        f"{api.out_of_order} out of order in a chat"
    )
    print(f"  warnings logged: {warnings.count}")
    for line in warnings.first:
        print(f"    {line}")


def print_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, frames: int) -> None:
    print("  where Python memory grew from a quarter of the soak to its end (tracemalloc):")
    key = "lineno" if frames == 1 else "traceback"
    for stat in after.compare_to(before, key)[:12]:
        print(f"    {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
        for frame in stat.traceback.format()[-2 * frames :]:
            print(f"        {frame.strip()}")


async def main(args: argparse.Namespace) -> int:
    warnings = Warnings()
    logging.getLogger().addHandler(warnings)
    api = FakeBotAPI(
        action_s=args.action_ms / 1000,
        rate_limit_every=args.rate_limit_every,
        retry_after=args.retry_after,
    )
    server = web.Application()
    server.router.add_post("/bot{token}/{method}", api.handle)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    lines: list[dict[str, Any]] = []
    curve: list[tuple[int, float]] = []
    soak_from = args.rounds * args.burst
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            vault={"path": str(Path(tmp) / "bench.db")},  # type: ignore[arg-type]
            auth={"allow": ["telegram:*"]},  # type: ignore[arg-type]
            telegram={"enabled": True, "base_url": f"http://127.0.0.1:{port}/bot"},  # type: ignore[arg-type]
        )
        config = Config(
            settings=settings, secrets=Secrets({"TELEGRAM_BOT_TOKEN": TOKEN}), source=None
        )
        channels = build_channels(config)
        async with App(
            config=config,
            channels=channels,
            llm_override=EchoModel(args.model_ms / 1000),
            use_llm_override=True,
        ) as app:
            stop = asyncio.Event()
            serving = asyncio.create_task(app.serve(stop))
            await asyncio.wait_for(channels[0].started.wait(), 10)  # type: ignore[attr-defined]
            print(
                f"telegram burst: {args.rounds} x {args.burst} messages over {args.chats} chats, "
                f"then {args.soak} at {args.rate:g}/s; model {args.model_ms:g} ms, "
                f"sendChatAction {args.action_ms:g} ms"
            )
            snapshots: list[tracemalloc.Snapshot] = []

            def sample(unique: int) -> None:
                if unique % args.rss_every == 0:
                    curve.append((unique, rss_mib()))
                if args.tracemalloc and unique == soak_from + args.soak // 4:
                    snapshots.append(tracemalloc.take_snapshot())

            curve.append((0, rss_mib()))
            api.on_answer.append(sample)
            for i in range(args.rounds):
                load = burst(api, args.chats, args.burst)
                lines.append(
                    await run_phase(api, app, warnings, f"burst {i + 1}", load, args.burst, 300)
                )
            if args.soak:
                if args.tracemalloc:
                    tracemalloc.start(args.tracemalloc)
                load = paced(api, args.chats, args.soak, args.rate)
                wait = args.soak / args.rate + 300
                lines.append(await run_phase(api, app, warnings, "soak", load, args.soak, wait))
                if snapshots:
                    print_growth(snapshots[0], tracemalloc.take_snapshot(), args.tracemalloc)
            stop.set()
            await serving  # drained: every counter is final
            print_errors(app, api, warnings)
    await runner.cleanup()
    print(f"  RSS (messages answered: MiB; the soak starts after {soak_from:,}):")
    for row in range(0, len(curve), 10):
        print("    " + ", ".join(f"{n:,}: {mib:.1f}" for n, mib in curve[row : row + 10]))
    half = [c for c in curve if c[0] >= soak_from + args.soak // 2]
    if len(half) >= 2:
        (n0, r0), (n1, r1) = half[0], half[-1]
        slope = (r1 - r0) / max(1, n1 - n0) * 1000
        print(f"    second half of the soak: {slope:+.3f} MiB per 1,000 messages")
    failed = any(line["unanswered"] or line["duplicated"] or line["timed_out"] for line in lines)
    print("every message answered exactly once" if not failed else "FAILED: see above")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--burst", type=int, default=2000, help="messages per burst")
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--soak", type=int, default=20_000, help="messages in the paced soak")
    parser.add_argument("--rate", type=float, default=100.0, help="soak rate, messages/s")
    parser.add_argument("--rss-every", type=int, default=1000)
    parser.add_argument("--model-ms", type=float, default=20.0)
    parser.add_argument("--action-ms", type=float, default=50.0, help="sendChatAction latency")
    parser.add_argument("--rate-limit-every", type=int, default=0)
    parser.add_argument("--retry-after", type=int, default=30)
    parser.add_argument(
        "--tracemalloc", type=int, default=0, metavar="FRAMES", help="trace allocations (0 = off)"
    )
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)  # warnings are counted; errors also printed
    logging.getLogger().handlers[0].setLevel(logging.ERROR)
    sys.exit(asyncio.run(main(arguments)))
