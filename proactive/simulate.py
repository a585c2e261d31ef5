"""The simulator: the real store, policy and engine on a virtual clock with synthetic users.

A population spread over 24 IANA zones (the window starts just before the US/Canada DST change
of 2026-03-08, so zones cross a DST change inside any run of three days or more) writes
messages at plausible local hours, registers follow-ups and reminders, sometimes cancels them,
and answers proactive messages with some probability. Some users lapsed before the window
(dormancy and engagement-drop triggers) or left a question unanswered. A scripted gate sends,
skips, defers or answers with a malformed marker; the channel sometimes fails or times out.
The engine is driven tick by tick (every `step_minutes` of virtual time) and the scan on the
`scan_cron` schedule. Everything random comes from one seed, so a seed gives one report.

This module wires concrete pieces (temporary vault, delivery, in-memory channel) for the
`iris simulate` command only; the production wiring lives in `gateway/app/app.py`.
"""

from __future__ import annotations

import heapq
import itertools
import random
import tempfile
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self
from zoneinfo import ZoneInfo

from croniter import croniter

from gateway.core.clock import ManualClock
from gateway.core.errors import DeliveryPermanent, DeliveryUncertain
from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolCall
from gateway.core.messages import ChatRef, Inbound, Outbound, SentReceipt, UserRef
from gateway.turns.delivery import Delivery
from proactive.engine import Engine, EngineConfig
from proactive.execute import Executor
from proactive.gate import DECISION_TOOL
from proactive.policy import DAY_MS, HOUR_MS, PolicyConfig
from proactive.sim_report import Send, SimUser, build_report
from vault.conversations import Conversations
from vault.db import Vault
from vault.memories import Memories
from vault.migrations import migrate
from vault.outbox import Outbox
from vault.proactive.log import ProactiveLog
from vault.proactive.store import ProactiveStore

START = "2026-03-06T00:00:00+00:00"
ZONES = (
    "America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles",
    "America/St_Johns", "America/Phoenix", "America/Sao_Paulo", "America/Mexico_City",
    "Pacific/Honolulu", "Europe/London", "Europe/Berlin", "Europe/Moscow", "Africa/Lagos",
    "Africa/Johannesburg", "Asia/Dubai", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Shanghai",
    "Asia/Tokyo", "Australia/Sydney", "Australia/Lord_Howe", "Pacific/Auckland",
    "Pacific/Chatham", "UTC",
)  # fmt: skip
MIN_MS = 60_000


@dataclass(frozen=True, slots=True)
class SimConfig:
    users: int = 200
    days: int = 7
    seed: int = 1
    reply_probability: float = 0.4
    intent_probability: float = 0.3
    step_minutes: float = 5.0  # virtual time between engine ticks


class ScriptedGate:
    """The `LLM` port for the simulator: decisions drawn from the seed, some malformed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.calls = 0

    async def __call__(self, request: LLMRequest, chat_key: str | None) -> LLMResponse:
        self.calls += 1
        roll = self.rng.random()
        if roll < 0.04:
            return LLMResponse(parts=(TextPart("[SKIP] not worth it"),), stop_reason="end_turn",
                               model="sim")  # fmt: skip
        if roll < 0.16:
            args: dict[str, Any] = {"action": "skip", "reason": "not useful now"}
        elif roll < 0.26:
            args = {"action": "defer", "hours": self.rng.choice([1, 3, 6, 12])}
        else:
            args = {"action": "send", "message": f"Checking in ({self.calls})"}
        return LLMResponse(parts=(ToolCall(f"s{self.calls}", DECISION_TOOL, args),),
                           stop_reason="tool_use", model="sim")  # fmt: skip


@dataclass
class SimChannel:
    """Records every send with its virtual time; fails or times out now and then."""

    clock: ManualClock
    rng: random.Random
    name: str = "sim"
    sends: list[tuple[int, Outbound]] = field(default_factory=list)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def command_hint(self, command: str) -> str:
        return f"/{command}"

    async def typing(self, chat: ChatRef) -> None:
        return None

    async def run(self, on_inbound: Any) -> None:  # never started by the simulator
        return None

    async def send(self, out: Outbound) -> SentReceipt:
        roll = self.rng.random()
        if roll < 0.01:
            raise DeliveryPermanent("simulated: chat gone")
        self.sends.append((self.clock.now_ms(), out))
        if roll < 0.02:
            raise DeliveryUncertain("simulated: timeout after the request left")
        return SentReceipt(platform_message_ids=(str(len(self.sends)),))


class Simulation:
    def __init__(self, cfg: SimConfig, policy: PolicyConfig, engine_cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.policy = policy
        self.engine_cfg = engine_cfg
        self.rng = random.Random(cfg.seed)
        self.start = int(datetime.fromisoformat(START).timestamp() * 1000)
        self.end = self.start + cfg.days * DAY_MS
        self.clock = ManualClock(self.start)
        self.events: list[tuple[int, int, str, int]] = []
        self._seq = itertools.count()
        self.users: list[SimUser] = []

    def at(self, when: int, kind: str, user: int) -> None:
        heapq.heappush(self.events, (when, next(self._seq), kind, user))

    async def run(self) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="iris-sim-") as tmp:
            async with Vault(Path(tmp) / "sim.db") as vault:
                await migrate(vault)
                return await self._run(vault)

    async def _run(self, vault: Vault) -> dict[str, Any]:
        self.conversations = Conversations(vault)
        self.store = ProactiveStore(vault)
        self.plog = ProactiveLog(vault)
        channel = SimChannel(self.clock, random.Random(self.cfg.seed + 2))
        delivery = Delivery(outbox=Outbox(vault), channels={"sim": channel}, clock=self.clock)
        executor = Executor(
            store=self.store, plog=self.plog, memories=Memories(vault),
            call_model=ScriptedGate(random.Random(self.cfg.seed + 1)),
            deliver=delivery.deliver_pending, chat_lock=_no_lock, clock=self.clock,
            policy=self.policy, rng=random.Random(self.cfg.seed + 3),
        )  # fmt: skip
        # One item at a time: the gate script and the jitter draw in processing order, so
        # only a sequential run is reproducible from the seed.
        engine = Engine(vault=vault, store=self.store, executor=executor, clock=self.clock,
                        config=replace(self.engine_cfg, concurrency=1), name="sim")  # fmt: skip
        await self._populate()
        step = int(self.cfg.step_minutes * MIN_MS)
        cron = croniter(self.engine_cfg.scan_cron, datetime.fromtimestamp(self.start / 1000, UTC))
        next_scan = int(cron.get_next(float) * 1000)
        seen = 0
        while self.clock.now_ms() < self.end:
            now = self.clock.now_ms()
            while self.events and self.events[0][0] <= now:
                _, _, kind, user = heapq.heappop(self.events)
                await self._event(kind, self.users[user])
            if now >= next_scan:
                await engine.scan()
                next_scan = int(cron.get_next(float) * 1000)
            await engine.tick()
            for _, out in channel.sends[seen:]:
                self._maybe_reply(out)
            seen = len(channel.sends)
            self.clock.advance(step / 1000)
        return await build_report(
            vault, seed=self.cfg.seed, days=self.cfg.days, start_ms=self.start,
            sim_users=self.users, sends=[Send(t, o.idempotency_key) for t, o in channel.sends],
            policy=self.policy, plog=self.plog, now_ms=self.clock.now_ms(),
        )  # fmt: skip

    async def _populate(self) -> None:
        for n in range(self.cfg.users):
            zone = ZONES[n % len(ZONES)]
            user = SimUser(index=n, name=f"user{n}", zone=zone, pk=0, chat_pk=0)
            self.users.append(user)
            profile = self.rng.random()
            if profile < 0.15:  # lapsed: daily for five weeks, silent for the last eight days
                for day in range(8, 43):
                    await self._write(user, self.start - day * DAY_MS - self._hour())
            elif profile < 0.25:  # the assistant's question went unanswered
                asked = self.start - 30 * HOUR_MS
                await self._write(user, asked - 5 * MIN_MS)
                await self.conversations.record_reply(
                    session=user.session_pk, chat=user.chat_pk, kind="chat",
                    text="Did the new router fix your connection?", tokens=10, now_ms=asked,
                )  # fmt: skip
            else:
                await self._write(user, self.start - DAY_MS)
            user.busy = profile >= 0.9  # writes a lot and commits to many things
            for day in range(self.cfg.days if profile >= 0.15 else 0):
                if self.rng.random() < 0.7:
                    for _ in range(self.rng.choice((1, 1, 2, 3)) + (3 if user.busy else 0)):
                        self.at(self._local_daytime(user, day), "chat", n)

    def _hour(self) -> int:
        return self.rng.randrange(1, 20) * HOUR_MS

    def _local_daytime(self, user: SimUser, day: int) -> int:
        base = datetime.fromtimestamp((self.start + day * DAY_MS) / 1000, UTC)
        local = base.astimezone(ZoneInfo(user.zone)).replace(
            hour=self.rng.randrange(7, 23), minute=self.rng.randrange(60)
        )
        return max(self.start, int(local.timestamp() * 1000))

    async def _write(self, user: SimUser, when: int) -> None:
        rec = await self.conversations.record_inbound(
            Inbound(chat=ChatRef(channel="sim", chat_id=user.name),
                    user=UserRef(channel="sim", user_id=user.name), text="hi",
                    message_id=f"{user.name}:{when}"),
            kind="chat", tokens=1, now_ms=when,
        )  # fmt: skip
        assert rec is not None  # no dedupe keys were given, so it is never a duplicate
        if not user.pk:
            user.pk, user.chat_pk = rec.user_pk, rec.chat_pk
            await self.conversations.set_timezone(rec.user_pk, user.zone)
        user.session_pk = rec.session_pk

    async def _event(self, kind: str, user: SimUser) -> None:
        now = self.clock.now_ms()
        await self._write(user, now)
        await self.plog.mark_engaged(user.pk, now)
        chance = 0.9 if user.busy else self.cfg.intent_probability
        if kind != "chat" or self.rng.random() >= chance:
            return
        reminder = self.rng.random() < 0.2
        exact = reminder and self.rng.random() < 0.5
        delay = self.rng.randrange(30, 48 * 60) * MIN_MS
        intent = await self.store.add_intent(
            chat=user.chat_pk, user=user.pk, what="follow up on the plan", why="user committed",
            confidence=round(self.rng.uniform(0.3, 1.0), 2),
            kind="user_reminder" if reminder else "ai", exact_time=exact,
            execute_at=now + delay, now_ms=now,
        )  # fmt: skip
        if self.rng.random() < 0.05:
            await self.store.cancel_intent(user.pk, intent, now)

    def _maybe_reply(self, out: Outbound) -> None:
        user = self.users[int(out.chat.chat_id.removeprefix("user"))]
        if self.rng.random() < self.cfg.reply_probability:
            self.at(self.clock.now_ms() + self.rng.randrange(5, 600) * MIN_MS, "reply", user.index)


class _NoLock:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def _no_lock(key: str) -> _NoLock:
    """The simulator has no concurrent turns: no chat lock is needed."""
    return _NoLock()


async def simulate(
    cfg: SimConfig, policy: PolicyConfig, engine_cfg: EngineConfig
) -> dict[str, Any]:
    return await Simulation(cfg, policy, engine_cfg).run()
