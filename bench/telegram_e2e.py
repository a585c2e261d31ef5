"""Telegram end-to-end benchmark: many users -> loopback fake Bot API -> real adapter -> App.

A small aiohttp server on 127.0.0.1 plays the Bot API (getMe, getUpdates long polling,
sendMessage, sendChatAction, ...). The real `TelegramChannel` polls it and the real `App`
(vault on a temp file, router, auth, delivery) answers with a zero-latency model, so the
figures are the gateway's own overhead: translation, dedupe and records in SQLite, outbox,
HTTP both ways. Latency runs from the moment an update becomes available to getUpdates to
the moment its reply reaches sendMessage (replies within a chat arrive in order).

    python bench/telegram_e2e.py --users 200 --messages 5           # burst: throughput
    python bench/telegram_e2e.py --users 50 --messages 10 --rate 100 # paced: latency
    python bench/telegram_e2e.py --compare 3                          # Iris against the floor
    python bench/telegram_e2e.py --compare 1 --profile /tmp/turn      # ... and where CPU goes

`--compare N` sets Iris beside the floor: a bare python-telegram-bot bot (`Application`,
concurrent updates) that makes one Anthropic SDK call per message and replies, the least any
gateway on these libraries can cost. Each runs as its own process (`--serve`) against the
same fakes in this one, the loopback Bot API of `tests/fakes/bot_api_server.py` and the model
of `tests/fakes/anthropic_server.py`, so the fakes' CPU is not counted. Closed loop: every
user waits for the reply before writing again (`--users 20 --messages 10` by default here),
after one unmeasured warm-up message from each of as many other users (so the measured users
are new to the server); Iris and the floor alternate, N runs each. Iris
runs as configured by default (durable intake, budgets). Besides throughput and latency each
run prints the server's CPU per message (process time, all threads), the figure that least
depends on what else the machine is doing, the Bot API calls it made, and its context switches
per message (`switches W+P/msg`: W times a thread of it waited, for I/O, a lock or the
interpreter lock, and P times one was preempted). `--ablate` adds
Iris without its typing indicator, and Iris with the analyzer's lexical rules instead of
embedding messages with the local model (what each costs); each Iris run also prints how many
messages the analyzer embedded and how many it judged by the rules alone because its
`[analyzer] embed_share` was spent (`--embed-share X` sets it; 1 = no limit).
`--profile PREFIX` runs cProfile over
the measured window of each server and prints where its event-loop thread's CPU went;
aiosqlite's worker thread is not in the profile (it is in the CPU figure).

Size: over 400 lines with `--compare`: the floor bot, the server process protocol and the
report share this module's fakes and constants, so they stay beside the older modes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import InstantModel, peak_rss_mib, percentile, profile_summary, reference_ms
from channels.telegram import TelegramChannel
from gateway.analyzer.feature import AnalyzerFeature
from gateway.app.app import App
from gateway.app.config import Config, Secrets, Settings
from gateway.core.messages import ChatRef
from tests.fakes.anthropic_server import AnthropicFaultServer
from tests.fakes.bot_api_server import BotAPIServer

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
            vault={"path": str(Path(tmp) / "bench.db")},
            auth={"allow": ["telegram:*"]},
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


# --- Iris against the floor ------------------------------------------------------------------

KINDS = ("iris", "floor", "iris-no-typing", "iris-lexical")
MODEL = "claude-sonnet-5-5"  # priced in the default [limits.prices], so budgets are counted


class _NoTyping(TelegramChannel):
    """The adapter without its typing indicator: for `iris-no-typing`, what it costs."""

    async def typing(self, chat: ChatRef) -> None:
        return None


_APPS: list[App] = []  # the served app, for its analyzer counters at each mark


def _embeddings() -> tuple[float, float]:
    """The analyzer's (embedded, shed) messages so far in the served app."""
    if not _APPS:
        return 0.0, 0.0
    got = _APPS[0].metrics.counter_values().get("iris_analyzer_embeddings_total", {})
    return got.get("embedded", 0.0), got.get("shed", 0.0)


async def serve_iris(
    bot_url: str,
    model_url: str,
    stop: asyncio.Event,
    ready: asyncio.Event,
    typing: bool = True,
    semantic: bool = True,
    embed_share: float | None = None,
) -> None:
    analyzer: dict[str, Any] = {"semantic": semantic}
    if embed_share is not None:
        analyzer["embed_share"] = embed_share
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            vault={"path": str(Path(tmp) / "bench.db")},
            auth={"allow": ["telegram:*"]},
            llm={"base_url": model_url, "model": MODEL},
            analyzer=analyzer,
        )
        config = Config(settings=settings, secrets=Secrets({"ANTHROPIC_API_KEY": "k"}), source=None)
        if typing:
            channel = TelegramChannel(token=TOKEN, base_url=bot_url)
        else:
            channel = _NoTyping(token=TOKEN, base_url=bot_url)
        async with App(config=config, channels=[channel]) as app:
            _APPS.append(app)
            serving = asyncio.create_task(app.serve(stop))
            await asyncio.wait_for(channel.started.wait(), 30)
            side = app.feature(AnalyzerFeature).semantic
            if side is not None:  # the start-up job embeds the generic phrasings: waited for
                await side.warm()
            ready.set()
            await serving


async def serve_floor(
    bot_url: str, model_url: str, stop: asyncio.Event, ready: asyncio.Event
) -> None:
    """The bare bot: PTB's Application polling, one SDK call per message, one reply."""
    import anthropic
    from telegram import Update
    from telegram.ext import ApplicationBuilder, ContextTypes, MessageHandler, filters

    model = anthropic.AsyncAnthropic(api_key="k", base_url=model_url)

    async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None or message.text is None:
            return
        reply = await model.messages.create(
            model=MODEL, max_tokens=2048, messages=[{"role": "user", "content": message.text}]
        )
        text = "".join(b.text for b in reply.content if b.type == "text")
        await context.bot.send_message(message.chat_id, text)

    bot = (
        ApplicationBuilder()
        .token(TOKEN)
        .base_url(bot_url)
        .concurrent_updates(True)
        .connection_pool_size(64)
        .build()
    )
    bot.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, answer))
    async with model, bot:
        assert bot.updater is not None
        await bot.updater.start_polling(poll_interval=0.0, timeout=30)
        await bot.start()
        ready.set()
        await stop.wait()
        await bot.updater.stop()
        await bot.stop()


async def serve(
    kind: str, bot_url: str, model_url: str, profile: str, embed_share: float | None = None
) -> None:
    """A server process: `ready` once polling; SIGUSR1 opens and closes the measured window
    (printing the process time, profiling in between with `profile`); SIGTERM stops it."""
    loop = asyncio.get_running_loop()
    stop, ready = asyncio.Event(), asyncio.Event()
    profiler = cProfile.Profile() if profile else None
    marks: list[float] = []

    def mark() -> None:
        marks.append(time.process_time())
        embedded, shed = _embeddings()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"cpu {marks[-1]:.6f} {time.thread_time():.6f} {embedded} {shed} "
            f"{usage.ru_nvcsw} {usage.ru_nivcsw}",
            flush=True,
        )
        if profiler is not None:
            if len(marks) == 1:
                profiler.enable()
            elif len(marks) == 2:
                profiler.disable()
                profiler.dump_stats(profile)

    loop.add_signal_handler(signal.SIGUSR1, mark)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if kind == "floor":
        task = asyncio.create_task(serve_floor(bot_url, model_url, stop, ready))
    else:
        typing, semantic = kind != "iris-no-typing", kind != "iris-lexical"
        task = asyncio.create_task(
            serve_iris(bot_url, model_url, stop, ready, typing, semantic, embed_share)
        )
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if ready.is_set():
        print("ready", flush=True)
    await task


class CountingBotAPI(BotAPIServer):
    """The loopback Bot API, counting the calls by method."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    async def _answer(self, method: str, fields: dict[str, Any]) -> Any:
        self.calls[method] += 1
        return await super()._answer(method, fields)


async def closed_loop(api: BotAPIServer, users: int, messages: int, first: int) -> list[float]:
    """Each user writes, waits for the reply, writes again; latencies in ms."""
    latencies: list[float] = []

    async def user(chat: int) -> None:
        scanned = 0
        for m in range(messages):
            got = False

            def replied() -> bool:
                nonlocal scanned, got
                while scanned < len(api.sent):
                    got = got or api.sent[scanned].chat_id == chat
                    scanned += 1
                return got

            started = time.perf_counter()
            api.add_message(chat_id=chat, text=f"message {m} from {chat}")
            await api.wait(replied)
            latencies.append((time.perf_counter() - started) * 1000)

    async with asyncio.TaskGroup() as tg:
        for u in range(users):
            tg.create_task(user(first + u))
    return latencies


async def one_run(
    kind: str, users: int, messages: int, profile: str, embed_share: float | None = None
) -> dict[str, float]:
    async with CountingBotAPI() as api, AnthropicFaultServer() as model:
        argv = [sys.executable, __file__, "--serve", kind, "--bot-url", api.base_url]
        argv += ["--model-url", model.base_url, "--profile", profile]
        if embed_share is not None:
            argv += ["--embed-share", str(embed_share)]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RuntimeError(f"{kind} server did not start: {line!r}")
            await closed_loop(api, users, 1, first=50_000)  # warm-up, not measured
            proc.send_signal(signal.SIGUSR1)
            cpu0, loop0, embedded0, shed0, waits0, preempted0 = map(
                float, (await proc.stdout.readline()).split()[1:]
            )
            calls0 = sum(api.calls.values())
            by_method0 = Counter(api.calls)
            sent0 = len(api.sent)
            started, driver0 = time.perf_counter(), time.process_time()
            latencies = await closed_loop(api, users, messages, first=10_000)
            elapsed = time.perf_counter() - started
            driver = time.process_time() - driver0
            proc.send_signal(signal.SIGUSR1)
            cpu1, loop1, embedded1, shed1, waits1, preempted1 = map(
                float, (await proc.stdout.readline()).split()[1:]
            )
            calls1 = sum(api.calls.values())
            methods = ", ".join(f"{m} {n}" for m, n in (api.calls - by_method0).most_common())
            replies = len(api.sent) - sent0
        finally:
            if proc.returncode is None:
                proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)
        calls = len(model.requests)
        body = len(json.dumps(model.requests[-1])) if model.requests else 0
        tools = len(model.requests[-1].get("tools", ())) if model.requests else 0
    done = users * messages
    print(f"  {kind:14} calls while measured: {methods}; model request {body} B, {tools} tools")
    return {
        "throughput": done / elapsed,
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 99),
        "cpu_ms": (cpu1 - cpu0) * 1000 / done,
        "driver_ms": driver * 1000 / done,
        "threads_ms": ((cpu1 - cpu0) - (loop1 - loop0)) * 1000 / done,
        "bot_calls": (calls1 - calls0) / done,
        "extra_replies": replies - done,
        "model_calls": calls,
        "embedded": embedded1 - embedded0,
        "shed": shed1 - shed0,
        "waits": (waits1 - waits0) / done,
        "preempted": (preempted1 - preempted0) / done,
    }


def load() -> float:
    return os.getloadavg()[0]


async def compare(
    rounds: int,
    users: int,
    messages: int,
    profile: str,
    kinds: tuple[str, ...],
    embed_share: float | None = None,
) -> None:
    print(f"closed loop: {users} users x {messages} messages, {rounds} alternating runs each")
    print(f"  reference loop {reference_ms():.0f} ms, load {load():.2f}")
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for r in range(rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            prof = f"{profile}.{kind}.prof" if profile else ""
            before = load()
            got = await one_run(kind, users, messages, prof, embed_share)
            runs[kind].append(got)
            print(
                f"  {kind:14} {got['throughput']:7.1f} msg/s  p50 {got['p50']:6.1f} ms  "
                f"p99 {got['p99']:6.1f} ms  cpu {got['cpu_ms']:5.2f} ms/msg "
                f"(other threads {got['threads_ms']:4.2f}; fakes {got['driver_ms']:4.2f})  "
                f"{got['bot_calls']:.1f} Bot API calls/msg  "
                f"switches {got['waits']:.0f}+{got['preempted']:.0f}/msg  "
                f"embedded {got['embedded']:.0f}, shed {got['shed']:.0f}  "
                f"load {before:.2f}->{load():.2f}"
                + (f"  ({got['extra_replies']:+.0f} replies)" if got["extra_replies"] else "")
            )
    print("medians:")
    med = {
        kind: {k: statistics.median(r[k] for r in got) for k in got[0]}
        for kind, got in runs.items()
    }
    for kind, m in med.items():
        print(
            f"  {kind:14} {m['throughput']:7.1f} msg/s  p50 {m['p50']:6.1f} ms  "
            f"p99 {m['p99']:6.1f} ms  cpu {m['cpu_ms']:5.2f} ms/msg"
        )
    f = med["floor"]
    for kind in (k for k in kinds if k != "floor"):
        i = med[kind]
        print(
            f"ratios {kind}/floor: throughput {i['throughput'] / f['throughput']:.2f}x "
            f"(target >= 0.8), p99 {i['p99'] / f['p99']:.2f}x (target <= 1.5), "
            f"p50 {i['p50'] / f['p50']:.2f}x, cpu {i['cpu_ms'] / f['cpu_ms']:.2f}x"
        )
    if profile:
        for kind in runs:
            profile_summary(f"{profile}.{kind}.prof", kind, users * messages)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5, help="messages per user")
    parser.add_argument("--rate", type=float, default=0.0, help="messages/s; 0 = all at once")
    parser.add_argument("--compare", type=int, default=0, help="Iris vs the floor, N runs each")
    parser.add_argument("--profile", default="", help="with --compare: cProfile file prefix")
    parser.add_argument("--ablate", action="store_true", help="with --compare: also Iris "
                        "without its typing indicator (what that costs)")  # fmt: skip
    parser.add_argument("--embed-share", type=float, default=None, help="with --compare: "
                        "Iris's [analyzer] embed_share (default: as configured)")  # fmt: skip
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--bot-url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--model-url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.serve:
        asyncio.run(serve(args.serve, args.bot_url, args.model_url, args.profile, args.embed_share))
    elif args.compare:
        users = 20 if args.users == parser.get_default("users") else args.users
        messages = 10 if args.messages == parser.get_default("messages") else args.messages
        kinds = KINDS if args.ablate else KINDS[:2]
        asyncio.run(compare(args.compare, users, messages, args.profile, kinds, args.embed_share))
    else:
        asyncio.run(main(args.users, args.messages, args.rate))
