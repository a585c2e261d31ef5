"""What the spending limits cost: the guard per model call, and a turn with them on and off.

Part one times `Budgets.admit` + `settle` alone on a realistic request (a 40-message history,
about 24k characters, with tools), the path every model call takes: estimate, meters,
reservation, settlement and the write-behind of the spend; with `--pg URL`, also on a
PostgreSQL vault, where every call reserves and settles in the vault (`SharedBudgets`: one
transaction each, so replicas share the caps). Part two runs the router benchmark's
closed loop (`bench/router.py`: M chats, each sending its next message when the previous reply
arrived, instant model, vault on disk) with `[limits]` at its defaults and without the limits
feature at all, alternating rounds so the VM's speed drift hits both alike.

    python bench/limits.py --calls 20000 --messages 3000 --chats 30 --rounds 3 [--pg URL]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import InstantModel, peak_rss_mib, reference_ms, summary_ms
from bench.router import NullChannel, client
from gateway.app.app import App
from gateway.app.config import Config, Secrets, Settings
from gateway.app.features import default_features
from gateway.core.clock import SystemClock
from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse, Payer, TextPart, ToolSpec
from gateway.core.messages import ChatRef, Inbound, UserRef
from gateway.core.metrics import Metrics
from gateway.limits.budgets import Budgets
from gateway.limits.feature import LimitsFeature
from gateway.limits.settings import LimitsSection
from gateway.limits.shared import SharedBudgets
from vault.backend import vault_for
from vault.budget_holds import SharedSpendStore
from vault.conversations import Conversations
from vault.migrations import migrate
from vault.spend import SpendStore


def request(payer: Payer) -> LLMRequest:
    turns = [
        LLMMessage.user(f"question {n}: " + "how do I do this thing " * 25)
        if n % 2 == 0
        else LLMMessage.assistant("here is how " * 50)
        for n in range(40)
    ]
    tool = ToolSpec("remember", "Save a fact about the user.", {"type": "object"})
    return LLMRequest(
        system_stable="You are Iris. " * 20,
        messages=tuple(turns),
        tools=(tool,) * 6,
        max_tokens=2048,
        payer=payer,
    )


async def guard_alone(calls: int, vault_dir: Path, url: str = "") -> None:
    async with vault_for(vault_dir / "guard.db", url) as vault:
        await migrate(vault)
        conversations = Conversations(vault)
        who = UserRef(channel="bench", user_id="u")
        hello = Inbound(chat=ChatRef(channel="bench", chat_id="c"), user=who, text="hi",
                        message_id="1")  # fmt: skip
        await conversations.record_inbound(hello, kind="chat", tokens=1, now_ms=0)
        user = await conversations.get_user(who)
        assert user is not None
        common: dict[str, Any] = {
            "settings": LimitsSection(
                user_usd_per_day=1e6, user_usd_per_month=1e6, global_usd_per_day=1e6
            ),
            "clock": SystemClock(),
            "metrics": Metrics(),
            "is_admin": lambda key: False,
            "default_timezone": "UTC",
        }
        budgets = (
            SharedBudgets(store=SharedSpendStore(vault), owner="bench", lease_s=60, **common)
            if url
            else Budgets(store=SpendStore(vault), **common)
        )
        req = request(Payer(user_pk=user.pk, timezone="Europe/Berlin"))
        answer = LLMResponse(
            parts=(TextPart("ok"),), stop_reason="end_turn", model="m", input_tokens=900,
            output_tokens=120, cache_read_tokens=5000,
        )  # fmt: skip
        timings: list[float] = []
        cpu = time.process_time()
        for _ in range(calls):
            started = time.perf_counter()
            hold = await budgets.admit(req, "claude-sonnet-5-5")
            hold.settle(answer)
            timings.append((time.perf_counter() - started) * 1000)
        await vault.idle()
        cpu = (time.process_time() - cpu) * 1000 / calls
    where = "PostgreSQL, shared" if url else "SQLite, in memory"
    print(f"guard alone on {where} ({calls} calls, admit + settle): {summary_ms(timings)}; "
          f"CPU {cpu:.3f} ms a call (this process)")  # fmt: skip


async def one_round(app: App, chats: int, per_chat: int, tag: str) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(client(app, c, per_chat, [], tag) for c in range(chats)))
    return chats * per_chat / (time.perf_counter() - started)


async def turns(messages: int, chats: int, rounds: int, vault_dir: Path) -> None:
    per_chat = max(1, messages // chats)
    rates: dict[str, list[float]] = {"on": [], "absent": []}
    apps: dict[str, App] = {}
    for name in rates:
        vault = {"path": str(vault_dir / f"{name}.db")}
        settings = Settings(vault=vault, auth={"allow": ["bench:*"]})
        config = Config(settings=settings, secrets=Secrets({}), source=None)
        features = [f for f in default_features(config)
                    if name == "on" or not isinstance(f, LimitsFeature)]  # fmt: skip
        apps[name] = App(config=config, channels=[NullChannel()], llm_override=InstantModel(),
                         use_llm_override=True, features=features)  # fmt: skip
        await apps[name].__aenter__()
    try:
        for name, app in apps.items():
            await one_round(app, chats, 2, f"warm-{name}")
        for n in range(rounds):
            for name, app in apps.items():
                rate = await one_round(app, chats, per_chat, f"r{n}-{name}")
                rates[name].append(rate)
                print(f"round {n + 1}, limits feature {name}: {rate:,.0f} messages/s")
    finally:
        for app in apps.values():
            await app.__aexit__(None, None, None)
    on, off = statistics.median(rates["on"]), statistics.median(rates["absent"])
    print(f"turns: limits on {on:,.0f} messages/s, absent {off:,.0f} (ratio {on / off:.2f})")


async def main(
    calls: int, messages: int, chats: int, rounds: int, vault_dir: Path, pg: str
) -> None:
    print(f"machine speed: reference loop {reference_ms():.0f} ms")
    await guard_alone(calls, vault_dir)
    if pg:
        await guard_alone(max(1, calls // 10), vault_dir, pg)
    await turns(messages, chats, rounds, vault_dir)
    print(f"peak RSS: {peak_rss_mib():.1f} MiB")
    print(f"machine speed after: reference loop {reference_ms():.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--messages", type=int, default=3_000)
    parser.add_argument("--chats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg", default="", help="also time the guard on this PostgreSQL URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.calls, args.messages, args.chats, args.rounds, Path(tmp), args.pg)
        asyncio.run(main(*work))
