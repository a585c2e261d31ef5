"""The simulator: the real store, policy, gate loop and engine on a virtual clock.

A population spread over 24 IANA zones (the window starts just before the US/Canada DST change
of 2026-03-08, so zones cross a DST change inside any run of three days or more) writes
messages at plausible local hours (07:00–23:00), registers follow-ups and reminders, sometimes
cancels them, and answers proactive messages with some probability. The model's follow-ups
come due later the same day, about the same time the next day, or in two to four days;
reminders in minutes to hours, or at an exact local time (06:00–22:45) one to three days
ahead. A tenth of the users are "busy": they write a lot and the model registers a follow-up
for almost every message, more than the quota lets out. Some users lapsed before the window
(dormancy and engagement-drop triggers) or left a question unanswered. A scripted gate sends,
skips, defers, answers with a malformed marker, or first remembers something with the real
memory tool; the channel sometimes fails or times out. The engine runs one tick every
`step_minutes` of virtual time, claiming everything due (not `max_per_tick` at a time: which
items share a tick with a user's would depend on who else is simulated), the scan on the
`scan_cron` schedule; virtual time jumps over steps where nothing is due, which changes nothing
since such a tick does nothing.

Everything random comes from the seed: each user's behaviour from a stream of their own, the
rest from draws keyed by names (`Names`: a user's n-th follow-up; a check-in's user, type and
time — never a row id, which depends on the other users' rows): the gate's answer, a send's
failure, the user's reply, the executor's jitter and release slot. So the engine runs with its
configured concurrency, a seed gives one report, and a `Shard` of the population does exactly
what those users do in the whole run (`proactive/sim_shards.py`: shards in processes; the
global quota, the one coupling). One step's user events are recorded together (one vault hop).

This module wires concrete pieces for `iris simulate` only (production: `gateway/app/app.py`).
The throwaway vault is an `InlineVault` (`vault/inline.py`): the same stores, its batches run on
the event loop's thread (nothing else uses it; the hop to a worker thread cost more than SQL).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from gateway.agent.memory_tools import memory_tools
from gateway.agent.tools import ToolRegistry
from gateway.core.clock import ManualClock
from gateway.core.messages import ChatRef, Inbound, Outbound, UserRef
from gateway.turns.delivery import Delivery
from proactive.engine import Engine, EngineConfig, TickReport, next_scan
from proactive.execute import Executor
from proactive.policy import DAY_MS, HOUR_MS, PolicyConfig
from proactive.sim_facts import Facts, collect
from proactive.sim_parts import WHOLE, Keyed, Names, ScriptedGate, Shard, SimChannel, no_lock
from proactive.sim_report import Send, SimUser
from proactive.tools import ProactiveTools
from vault.conversations import Conversations, Recorded
from vault.db import Vault
from vault.inline import InlineVault
from vault.memories import Memories
from vault.migrations import migrate
from vault.outbox import Outbox
from vault.proactive.log import ProactiveLog, engagement_record_hook
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
START_MS = int(datetime.fromisoformat(START).timestamp() * 1000)
MIN_MS = 60_000
# The simulator's `max_per_tick`: more than a step ever has due.
ALL_DUE = 1 << 30
LAPSED, BUSY = 0.15, 0.9  # a user's profile (their first draw): below, at or above
# Progress: (virtual ms done, virtual ms in all).
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class SimConfig:
    users: int = 200
    days: int = 7
    seed: int = 1
    reply_probability: float = 0.4
    intent_probability: float = 0.3
    step_minutes: float = 10.0  # virtual time between engine ticks (polls)
    # None: at least what the population could use (`per_user_daily` × users), so a cap sized
    # for a real deployment does not turn a large synthetic run into a measurement of the cap.
    global_daily: int | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """What a user event does, drawn before the step's writes run together."""

    user: SimUser
    intent: dict[str, Any] | None = None
    cancel: bool = False


def user_stream(seed: int, n: int) -> random.Random:
    """User `n`'s own random stream: what they do never depends on who else is simulated."""
    return random.Random(f"{seed}/{n}")


def sim_policy(cfg: SimConfig, policy: PolicyConfig) -> PolicyConfig:
    """The policy a run uses: the global quota set by `cfg`, or raised to what the whole
    population could use (every shard of it gets the whole population's)."""
    if cfg.global_daily is not None:
        return replace(policy, global_daily=cfg.global_daily)
    return replace(policy, global_daily=max(policy.global_daily, policy.per_user_daily * cfg.users))


class Simulation:
    def __init__(
        self, cfg: SimConfig, policy: PolicyConfig, engine_cfg: EngineConfig,
        shard: Shard = WHOLE,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.shard = shard
        self.policy = policy = sim_policy(cfg, policy)
        # Every item due in a step is claimed in one tick: the items sharing a tick with a
        # user's must not depend on who else is simulated (see the module's docstring).
        self.engine_cfg = replace(engine_cfg, max_per_tick=ALL_DUE)
        self.start = START_MS
        self.end = self.start + cfg.days * DAY_MS
        self.clock = ManualClock(self.start)
        self.events: list[tuple[int, int, str, int]] = []
        self._seq = itertools.count()
        self.users: dict[int, SimUser] = {}
        self.rngs: dict[int, random.Random] = {}
        self.names = Names()

    def at(self, when: int, kind: str, user: int) -> None:
        heapq.heappush(self.events, (when, next(self._seq), kind, user))

    async def run(self, progress: Progress | None = None) -> Facts:
        with tempfile.TemporaryDirectory(prefix="iris-sim-", dir=_scratch_dir()) as tmp:
            async with InlineVault(Path(tmp) / "sim.db") as vault:
                await migrate(vault)
                return await self._run(vault, progress or (lambda done, total: None))

    def _executor(self, vault: Vault, delivery: Delivery) -> Executor:
        memories = Memories(vault)
        tools = ToolRegistry()
        tools.register(*memory_tools(memories))
        tools.register(
            *ProactiveTools(store=self.store, plog=self.plog, policy=self.policy,
                            default_confidence=0.8).tools()
        )  # fmt: skip
        self.gate = ScriptedGate(self.cfg.seed + 1, self.names.label)
        return Executor(
            store=self.store, plog=self.plog, memories=memories, call_model=self.gate,
            deliver=delivery.deliver_pending, chat_lock=no_lock, clock=self.clock,
            policy=self.policy, rng=random.Random(self.cfg.seed + 3), tools=tools.proactive(),
            probe=self.names.probe, item_key=self.names.number, user_key=Names.user,
        )  # fmt: skip

    async def _run(self, vault: Vault, progress: Progress) -> Facts:
        self.conversations = Conversations(vault)
        self.store = ProactiveStore(vault)
        self.plog = ProactiveLog(vault)
        self.channel = channel = SimChannel(self.clock, self.cfg.seed + 2, self.names.key)
        delivery = Delivery(outbox=Outbox(vault), channels={"sim": channel}, clock=self.clock)
        engine = Engine(vault=vault, store=self.store, executor=self._executor(vault, delivery),
                        clock=self.clock, config=self.engine_cfg, name="sim")  # fmt: skip
        await self._populate()
        step = int(self.cfg.step_minutes * MIN_MS)
        zone = ZoneInfo(self.engine_cfg.scan_timezone)
        next_scan_at, last_scan = next_scan(self.engine_cfg.scan_cron, zone, self.start, None)
        seen = 0
        # When the next item is due, as an idle tick read it (and new intents moved it): until
        # then a tick would do nothing, so none runs, and the clock skips steps without events.
        due: int | None = None
        known = False
        while (now := self.clock.now_ms()) < self.end:
            progress(now - self.start, self.end - self.start)
            scan = now >= next_scan_at
            tick = scan or not known or (due is not None and due <= now)
            report = None
            if tick and not scan:
                # The step's events and its tick side by side: the events' writes are queued
                # before the tick's claim (it reads first), and nothing they register is due
                # at once (10 minutes at least), so the outcome is the same as one after the
                # other. With a scan, everything waits its turn: the scan reads the messages.
                registered, report = await asyncio.gather(
                    self._step_events(now), self._tick(engine)
                )
            else:
                registered = await self._step_events(now)
                if scan:
                    await engine.scan()
                    next_scan_at, last_scan = next_scan(
                        self.engine_cfg.scan_cron, zone, now, last_scan
                    )
                    report = await self._tick(engine)
            if report is not None:
                known, due = report.claimed == 0, report.next_due_ms
                # Replies are drawn per message, in key order: the order of sends within a
                # tick depends on timing, the replies must not.
                sent = channel.sends[seen:]
                for _, out in sorted(sent, key=lambda s: self.names.key(s[1].idempotency_key)):
                    self._maybe_reply(out)
                seen = len(channel.sends)
            for at in registered:
                due = at if due is None else min(due, at)
            self.clock.set(self._next_step(now, step, next_scan_at, due, known))
        progress(self.end - self.start, self.end - self.start)
        return await collect(
            vault, sends=[Send(t, o.idempotency_key) for t, o in channel.sends],
            names=self.names.key, users=self.users, policy=self.policy,
            gate_tool_calls=self.gate.tool_calls, now_ms=self.clock.now_ms(),
        )  # fmt: skip

    async def _tick(self, engine: Engine) -> TickReport:
        """The step's tick: it claims everything due (`ALL_DUE`)."""
        return await engine.tick()

    def _next_step(
        self, now: int, step: int, next_scan_at: int, due: int | None, known: bool
    ) -> int:
        """The next step boundary at which anything can happen (an event, a due item, a scan);
        the next one when the next due time is not known (a tick ran items)."""
        if not known:
            return now + step
        soonest = min(next_scan_at, self.end)
        if self.events:
            soonest = min(soonest, self.events[0][0])
        if due is not None:
            soonest = min(soonest, due)
        steps = max(1, -(-(soonest - now) // step))
        return now + steps * step

    async def _populate(self) -> None:
        writes: list[tuple[SimUser, int]] = []
        questions: list[tuple[SimUser, int]] = []
        chosen = self.shard.users
        for n in range(self.cfg.users) if chosen is None else chosen:
            zone = ZONES[n % len(ZONES)]
            user = SimUser(index=n, name=f"user{n}", zone=zone, pk=0, chat_pk=0)
            self.users[n] = user
            self.rngs[n] = rng = user_stream(self.cfg.seed, n)
            profile = rng.random()  # its first draw (`sim_shards.deal` reads it too)
            if profile < LAPSED:  # lapsed: every other day for 5 weeks, silent for the last 8 days
                for day in range(8, 43, 2):
                    writes.append((user, self.start - day * DAY_MS - self._hour(rng)))
            elif profile < 0.25:  # the assistant's question went unanswered
                asked = self.start - 30 * HOUR_MS
                writes.append((user, asked - 5 * MIN_MS))
                questions.append((user, asked))
            else:
                writes.append((user, self.start - DAY_MS))
            user.busy = profile >= BUSY  # writes a lot and commits to many things
            for day in range(self.cfg.days if profile >= LAPSED else 0):
                if rng.random() < 0.7:
                    for _ in range(rng.choice((1, 1, 2, 3)) + (3 if user.busy else 0)):
                        self.at(self._local_daytime(user, day), "chat", n)
        for at in range(0, len(writes), 512):
            await self._write_all(writes[at : at + 512])
        await asyncio.gather(
            *(self.conversations.set_timezone(u.pk, u.zone) for u in self.users.values()),
            *(self._ask_question(u, asked) for u, asked in questions),
        )

    async def _ask_question(self, user: SimUser, at: int) -> None:
        await self.conversations.record_reply(
            session=user.session_pk, chat=user.chat_pk, kind="chat",
            text="Did the new router fix your connection?", tokens=10, now_ms=at,
        )  # fmt: skip

    def _hour(self, rng: random.Random) -> int:
        return rng.randrange(1, 20) * HOUR_MS

    def _local_daytime(self, user: SimUser, day: int) -> int:
        base = datetime.fromtimestamp((self.start + day * DAY_MS) / 1000, UTC)
        rng = self.rngs[user.index]
        local = base.astimezone(ZoneInfo(user.zone)).replace(
            hour=rng.randrange(7, 23), minute=rng.randrange(60)
        )
        return max(self.start, int(local.timestamp() * 1000))

    async def _write_all(self, writes: list[tuple[SimUser, int]]) -> None:
        """Record the users' messages together (one vault hop), in order."""
        recorded = await asyncio.gather(*(self._record(user, when) for user, when in writes))
        for (user, _), rec in zip(writes, recorded, strict=True):
            user.pk, user.chat_pk, user.session_pk = rec.user_pk, rec.chat_pk, rec.session_pk

    async def _record(self, user: SimUser, when: int) -> Recorded:
        rec = await self.conversations.record_inbound(
            Inbound(chat=ChatRef(channel="sim", chat_id=user.name),
                    user=UserRef(channel="sim", user_id=user.name), text="hi",
                    message_id=f"{user.name}:{when}"),
            kind="chat", tokens=1, now_ms=when, hooks=(engagement_record_hook,),
        )  # fmt: skip
        assert rec is not None  # no dedupe keys were given, so it is never a duplicate
        return rec

    async def _step_events(self, now: int) -> list[int]:
        """Run the events due by `now`; return when the follow-ups they registered are due."""
        plans: list[Plan] = []
        while self.events and self.events[0][0] <= now:
            _, _, kind, index = heapq.heappop(self.events)
            plans.append(self._plan(kind, self.users[index]))
        if not plans:
            return []
        # The messages and the follow-ups they lead to are written together (one hop); every
        # user wrote before the window, so their ids are known.
        with_intent = [p for p in plans if p.intent is not None]
        records = asyncio.gather(*(self._record(p.user, now) for p in plans))
        registered = asyncio.gather(
            *(
                self.store.add_intent(chat=p.user.chat_pk, user=p.user.pk, now_ms=now, **p.intent)
                for p in with_intent
                if p.intent is not None
            )
        )
        _, ids = await asyncio.gather(records, registered)
        for p, intent in zip(with_intent, ids, strict=True):
            self.names.intent(p.user.name, intent)
        await asyncio.gather(
            *(
                self.store.cancel_intent(p.user.pk, intent, now)
                for p, intent in zip(with_intent, ids, strict=True)
                if p.cancel
            )
        )
        return [p.intent["execute_at"] for p in with_intent if p.intent is not None]

    def _plan(self, kind: str, user: SimUser) -> Plan:
        chance = 0.9 if user.busy else self.cfg.intent_probability
        rng = self.rngs[user.index]
        if kind != "chat" or rng.random() >= chance:
            return Plan(user)
        now = self.clock.now_ms()
        reminder = rng.random() < 0.2
        exact = reminder and rng.random() < 0.4
        if exact:
            at = self._wall_time(user, now)
        elif reminder:  # "remind me in 20 minutes / in 3 hours"
            at = now + rng.randrange(10, 8 * 60) * MIN_MS
        else:
            at = now + self._follow_up_delay(rng)
        intent = {
            "what": "follow up on the plan",
            "why": "user committed",
            "confidence": round(rng.uniform(0.3, 1.0), 2),
            "kind": "user_reminder" if reminder else "ai",
            "exact_time": exact,
            "execute_at": at,
        }
        return Plan(user, intent, cancel=rng.random() < 0.05)

    def _follow_up_delay(self, rng: random.Random) -> int:
        """When the model follows up: later today (30%), about this time tomorrow (50%), or in
        two to four days (20%)."""
        roll = rng.random()
        if roll < 0.3:
            return rng.randrange(60, 6 * 60) * MIN_MS
        if roll < 0.8:
            return rng.randrange(22 * 60, 26 * 60) * MIN_MS
        days = rng.randrange(2, 5)
        return (days * 24 * 60 + rng.randrange(-120, 120)) * MIN_MS

    def _wall_time(self, user: SimUser, now: int) -> int:
        """A reminder for an exact local time ("tomorrow at 9:30"): one to three days ahead,
        mostly in the day, now and then early or late (6:00–22:45)."""
        zone, rng = ZoneInfo(user.zone), self.rngs[user.index]
        day = datetime.fromtimestamp(now / 1000, zone) + timedelta(days=rng.randrange(1, 4))
        wall = day.replace(hour=rng.randrange(6, 23), minute=rng.choice((0, 15, 30, 45)),
                           second=0, microsecond=0)  # fmt: skip
        return int(wall.timestamp() * 1000)

    def _maybe_reply(self, out: Outbound) -> None:
        user = self.users[int(out.chat.chat_id.removeprefix("user"))]
        rng = Keyed(self.cfg.seed, "reply", self.names.key(out.idempotency_key))
        if rng.random() < self.cfg.reply_probability:
            self.at(self.clock.now_ms() + rng.randrange(5, 600) * MIN_MS, "reply", user.index)


def _scratch_dir() -> str | None:
    """Where the throwaway vault goes: memory-backed /dev/shm where there is one."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


async def simulate(
    cfg: SimConfig,
    policy: PolicyConfig,
    engine_cfg: EngineConfig,
    progress: Progress | None = None,
    shard: Shard = WHOLE,
) -> Facts:
    """Run the users of `shard`; `sim_facts.build_report` turns the facts into the report."""
    return await Simulation(cfg, policy, engine_cfg, shard).run(progress)
