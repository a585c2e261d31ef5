"""Gateway overhead: N messages across M chats through the real router and an on-disk vault.

The channel is in memory and the model answers instantly, so the figures are Iris's own cost
per message: dedupe, auth, recording, context assembly, the (zero-latency) model call and its
usage record, the outbox, delivery and recording the reply. Each chat is a client that sends
its next message when the previous reply arrived; all M chats run at once.

    python bench/router.py --messages 5000 --chats 50 --rounds 3

The VM's speed drifts from minute to minute (the same pure-Python loop takes up to twice as
long at times), so each round prints its own throughput and CPU cost, and the summary is the
median round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import InstantModel, peak_rss_mib, reference_ms, summary_ms
from gateway.app.app import App
from gateway.app.config import Config, Secrets, Settings
from gateway.core.messages import ChatRef, Inbound, SentReceipt, UserRef
from gateway.core.ports import InboundHandler


class NullChannel:
    name = "bench"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def command_hint(self, command: str) -> str:
        return f"/{command}"

    async def typing(self, chat: ChatRef) -> None:
        return None

    async def send(self, out: object) -> SentReceipt:
        return SentReceipt()

    async def run(self, on_inbound: InboundHandler) -> None:
        await asyncio.Event().wait()


async def client(app: App, chat: int, count: int, latencies: list[float], tag: str) -> None:
    ref = ChatRef(channel="bench", chat_id=f"c{chat}")
    user = UserRef(channel="bench", user_id=f"u{chat}")
    for n in range(count):
        message = Inbound(
            chat=ref,
            user=user,
            text=f"message {n} about topic {chat}",
            message_id=f"{tag}-{chat}-{n}",
        )
        started = time.perf_counter()
        await app.router.submit(message)
        latencies.append((time.perf_counter() - started) * 1000)


async def main(messages: int, chats: int, rounds: int, vault_dir: Path) -> None:
    settings = Settings(vault={"path": str(vault_dir / "bench.db")}, auth={"allow": ["bench:*"]})
    config = Config(settings=settings, secrets=Secrets({}), source=None)
    per_chat = max(1, messages // chats)
    total = per_chat * chats
    print(f"router: {total} messages across {chats} chats, vault on disk, {rounds} round(s)")
    print(f"machine speed: reference loop {reference_ms():.0f} ms")
    latencies: list[float] = []
    rates: list[float] = []
    async with App(
        config=config, channels=[NullChannel()], llm_override=InstantModel(), use_llm_override=True
    ) as app:
        # What `App.serve` runs beside the channels: WAL checkpoints off the writer.
        checkpoints = asyncio.create_task(app.vault.run_checkpoints(asyncio.sleep))
        await asyncio.gather(*(client(app, c, 2, [], "warm-up") for c in range(chats)))
        for n in range(rounds):
            started = time.perf_counter()
            loop_cpu, process_cpu = time.thread_time(), time.process_time()
            await asyncio.gather(
                *(client(app, c, per_chat, latencies, f"round{n}") for c in range(chats))
            )
            elapsed = time.perf_counter() - started
            loop_cpu = time.thread_time() - loop_cpu
            process_cpu = time.process_time() - process_cpu
            rates.append(total / elapsed)
            print(
                f"round {n + 1}: {total / elapsed:,.0f} messages/s; CPU per message "
                f"{loop_cpu / total * 1e6:,.0f} µs on the event loop, "
                f"{process_cpu / total * 1e6:,.0f} µs in all threads"
            )
        checkpoints.cancel()
        await asyncio.wait([checkpoints])
    print(f"throughput: {statistics.median(rates):,.0f} messages/s (median of the rounds)")
    print(f"per-message gateway time: {summary_ms(latencies)}")
    print(f"peak RSS: {peak_rss_mib():.1f} MiB")
    print(f"machine speed after: reference loop {reference_ms():.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (default 3)")
    parser.add_argument("--dir", help="where to put the vault (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(args.messages, args.chats, args.rounds, Path(args.dir or tmp)))
