"""The composition root: the only place that builds concrete pieces and wires them together.

`App` opens resources in order with an `AsyncExitStack` (vault first, so it closes last) and
builds: the stores and the model client; the agent with its context pipeline and tools; the
channels and delivery; the core and admin commands; then every feature (`default_features`
in `features.py`) contributes through the one seam (`gateway/features/contributions.py`),
`_apply` plugs in what they registered, `_steps` puts the pipeline together for the router,
and the HTTP server starts (`http.py`). `serve()` replays the intake, then runs the channels
and background jobs under one `TaskGroup`. Shutdown: the stop event stops intake, in-flight
turns drain under a deadline, background work is cancelled, then the exit stack closes
everything in reverse.

Size: a little over 400 lines; the one place that builds every piece in order (the parts that
need no order live beside it: `channels.py`, `http.py`, `lifecycle.py`, `replicas.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from gateway.admin.access import AccessCommands
from gateway.admin.chat import AdminCommands
from gateway.admin.gauges import register_vault_metrics
from gateway.admin.stats import Stats
from gateway.agent.agent import Agent
from gateway.agent.context import ContextPipeline
from gateway.agent.memory_tools import memory_tools
from gateway.agent.model_health import ModelHealth
from gateway.agent.providers import (
    CurrentMessageProvider,
    HistoryProvider,
    MemoryProvider,
    PersonaProvider,
    ProfileProvider,
    SummaryProvider,
)
from gateway.agent.tools import ToolRegistry
from gateway.agent.traces import TraceStore
from gateway.app.config import Config
from gateway.app.features import default_features
from gateway.app.heap import frozen_heap
from gateway.app.http import open_http
from gateway.app.intake import build_intake
from gateway.app.lifecycle import housekeeping
from gateway.app.model import KeyAlerts, open_model
from gateway.app.replicas import new_replica, open_fleet
from gateway.core.clock import SystemClock
from gateway.core.errors import FatalChannelError
from gateway.core.messages import ChannelHealth, ChatRef, CommandInfo
from gateway.core.metrics import Metrics
from gateway.core.ports import (
    LLM,
    Channel,
    Clock,
    ReportsHealth,
    TakesCommands,
)
from gateway.core.scope import Scope
from gateway.core.slots import TurnSlots
from gateway.features.contributions import BackgroundJob, Contributions, Feature, Services
from gateway.turns.auth import authorizer_from
from gateway.turns.commands import CommandRegistry
from gateway.turns.core_commands import CoreCommands
from gateway.turns.delivery import Delivery
from gateway.turns.locks import ChatLocks
from gateway.turns.replies import Replier
from gateway.turns.resume import Resumer
from gateway.turns.router import Router
from gateway.turns.steps import (
    agent_step,
    auth_step,
    command_step,
    dedupe_step,
    hooks_step,
    record_step,
)
from gateway.turns.turn import Step
from vault.analyzer import AnalyzerStore
from vault.audit import AuditLog, Outcome
from vault.backend import vault_for
from vault.conversations import Conversations
from vault.inbound import InboundLog
from vault.intake import IntakeStore
from vault.memories import Memories
from vault.migrations import migrate
from vault.outbox import Outbox
from vault.pairing import AccessStore
from vault.traces import TraceLog
from vault.usage import UsageLog

log = logging.getLogger(__name__)

F = TypeVar("F")
INTAKE_DOWN = "the vault cannot save inbound messages; they are not confirmed to the platforms"


@dataclass
class App:
    config: Config
    channels: list[Channel]
    clock: Clock = field(default_factory=SystemClock)
    llm_override: LLM | None = None
    use_llm_override: bool = False
    # None: the built-in features for this config (`default_features`).
    features: Sequence[Feature] | None = None
    # The caller's own jobs beside the features' (`iris chat` stops at the end of input).
    background: Sequence[BackgroundJob] = ()
    # False: no HTTP server whatever `[http]` says (`iris chat`: the admin API and `/healthz`
    # are `iris run`'s, which must find the port free beside a terminal chat).
    serve_http: bool = True

    def __post_init__(self) -> None:
        self._stack = AsyncExitStack()
        if self.features is None:
            self.features = default_features(self.config)

    async def __aenter__(self) -> Self:
        try:
            await self._build()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    async def _build(self) -> None:
        await self._build_stores()
        self._build_agent()
        await self._build_delivery()
        self._build_commands()
        self.contributions = self._collect()
        self._apply(self.contributions)
        self._build_router(self.contributions)
        # Every command is registered now: platform menus get the complete list.
        menu = [CommandInfo(name=c.name, summary=c.summary) for c in self.commands.user_commands()]
        for channel in self.channels:
            if isinstance(channel, TakesCommands):
                channel.use_commands(menu)
        # Settled before anything can send; the resend of waiting rows (never attempted, or
        # put off by a long Retry-After) runs in the background once serving.
        await self.delivery.settle_interrupted()
        self.http = await open_http(self, self._stack)

    async def _build_stores(self) -> None:
        s = self.config.settings
        self.vault = await self._stack.enter_async_context(
            vault_for(s.vault.path, s.vault.url, busy_timeout_ms=s.vault.busy_timeout_ms)
        )
        await migrate(self.vault)
        self.replica = new_replica(self.config)  # this process among those sharing the vault
        self.conversations = Conversations(self.vault)
        self.memories = Memories(self.vault)
        # Replicas share a PostgreSQL vault: outbox rows are leased to the one sending them.
        shared = self.vault.dialect == "postgresql"
        self.outbox = Outbox(
            self.vault,
            owner=self.replica.id if shared else None,
            lease_ms=int(s.vault.outbox_lease_s * 1000),
        )
        self.inbound_log = InboundLog(self.vault)
        self.intake_store = IntakeStore(self.vault)
        self.usage = UsageLog(self.vault)
        self._stack.push_async_callback(self.usage.flush)  # runs before the vault closes
        # The counters stay readable (admin stats) while the analyzer is switched off.
        self.analyzer_store = AnalyzerStore(self.vault)
        self.audit = AuditLog(self.vault)
        self.access = AccessStore(self.vault)
        self.authorizer = authorizer_from(s.auth, await self.access.grants())
        self.metrics = Metrics()
        register_vault_metrics(self.metrics, self.vault, self.outbox)
        self.fleet = open_fleet(self.config, self.vault, self.metrics, self.clock, self.replica)
        override, stack = self.llm_override, self._stack
        self.llm = override if self.use_llm_override else await open_model(self.config, stack)

    async def _audit_tool(
        self, scope: Scope, name: str, args: dict[str, Any], outcome: str, result: str
    ) -> None:
        """An admin-only tool the model called for an admin: audited like `/admin`."""
        await self.audit.record(
            actor=scope.user.key, via=scope.chat.channel, action=f"tool {name}", args=args,
            outcome=Outcome(outcome), result=result, now_ms=self.clock.now_ms(),
        )  # fmt: skip

    def _build_agent(self) -> None:
        s = self.config.settings
        self.traces = TraceStore(saved=TraceLog(self.vault))
        self.pipeline = ContextPipeline(
            budget_tokens=s.context.max_tokens,
            providers=[
                PersonaProvider(s.context.persona),
                ProfileProvider(s.proactive.default_timezone),
                SummaryProvider(),
                HistoryProvider(
                    self.conversations, s.context.history_messages, s.router.max_message_chars
                ),
                CurrentMessageProvider(),
                MemoryProvider(self.memories, s.context.memories),
            ],
        )
        self.tools = ToolRegistry(audited=self._audit_tool)
        self.tools.register(*memory_tools(self.memories))
        # Turns step out of their router slot while they wait on the model (`core/slots.py`).
        self.model_health = ModelHealth()
        self.turn_slots = TurnSlots(s.router.max_concurrency)
        self.agent = Agent(
            llm=self.llm,
            model=s.llm.model,
            pipeline=self.pipeline,
            tools=self.tools,
            usage=self.usage,
            traces=self.traces,
            max_tokens=s.llm.max_tokens,
            max_rounds=s.llm.max_tool_rounds,
            clock=self.clock,
            metrics=self.metrics,
            deadline_s=s.llm.turn_deadline_seconds,
            max_concurrency=s.llm.max_concurrency,
            health=self.model_health,
            turn_slots=self.turn_slots,
        )

    def _build_commands(self) -> None:
        s = self.config.settings
        self.commands = CommandRegistry()
        self.commands.register(
            *CoreCommands(
                registry=self.commands,
                conversations=self.conversations,
                memories=self.memories,
                agent=self.agent,
                context_budget=s.context.max_tokens,
                default_timezone=s.proactive.default_timezone,
                max_message_chars=s.router.max_message_chars,
            ).commands()
        )
        self.stats = Stats(vault=self.vault, usage=self.usage, analyzer=self.analyzer_store)
        self.stats.replicas = self.fleet.stats
        self.admin = AdminCommands(
            vault=self.vault, audit=self.audit, stats=self.stats, traces=self.traces,
            clock=self.clock,
        )  # fmt: skip
        self.commands.register(self.admin.command())
        self.admin.use_access(
            AccessCommands(store=self.access, authorizer=self.authorizer, clock=self.clock)
        )
        self.commands.on_denied = self.admin.denied

    def _collect(self) -> Contributions:
        """Every feature contributes, in order, to one `Contributions`."""
        assert self.features is not None
        self.locks = ChatLocks()
        c = Contributions(
            Services(
                vault=self.vault,
                conversations=self.conversations,
                memories=self.memories,
                clock=self.clock,
                metrics=self.metrics,
                call_model=self.agent.call,
                model_configured=self.llm is not None,
                delivery=self.delivery,
                chat_locks=self.locks,
                hint_for=self.replier.hint_for,
                pipeline=self.pipeline,
                traces=self.traces,
                tools=self.tools,
                replica_id=self.replica.id,
                hints=self.fleet.hints,
            )
        )
        for feature in self.features:
            feature.contribute(c)
        return c

    def _apply(self, c: Contributions) -> None:
        """What the features contributed, plugged in: the one place that does it."""
        self.commands.register(*c.commands)
        self.tools.register(*c.tools)
        for provider in c.providers:
            self.pipeline.register(provider)
        for sub in c.admin_subs:
            self.admin.add(sub)
        self.stats.sections.update(c.stats_sections)
        for g in c.gauges:
            self.metrics.gauge(g.name, g.help, g.labels, g.read, kind=g.kind)
        self.agent.guard = c.guard

    def feature(self, kind: type[F]) -> F:
        """The running feature of this type (tests and tools reach what it built)."""
        found = [f for f in self.features or () if isinstance(f, kind)]
        if not found:
            raise LookupError(f"no {kind.__name__} in this app")
        return found[0]

    async def _build_delivery(self) -> None:
        s = self.config.settings
        self.channel_map = {c.name: c for c in self.channels}
        for channel in self.channels:
            await self._stack.enter_async_context(channel)
        self.delivery = Delivery(
            outbox=self.outbox,
            channels=self.channel_map,
            clock=self.clock,
            max_attempts=s.delivery.max_attempts,
            give_up_after_s=s.delivery.give_up_after_minutes * 60,
            backoff_base_s=s.delivery.backoff_base_s,
            backoff_max_s=s.delivery.backoff_max_s,
            max_inline_wait_s=s.delivery.max_inline_wait_s,
            on_unreachable=self._mark_unreachable,
            metrics=self.metrics,
        )
        self.replier = Replier(
            delivery=self.delivery,
            conversations=self.conversations,
            channels=self.channel_map,
            clock=self.clock,
        )

    def _build_router(self, c: Contributions) -> None:
        s = self.config.settings
        self.router = Router(
            steps=self._steps(c),
            replier=self.replier,
            clock=self.clock,
            max_concurrency=s.router.max_concurrency,
            drain_timeout_s=s.router.drain_timeout_s,
            metrics=self.metrics,
            locks=self.locks,
            slots=self.turn_slots,
            vault_problem=self.vault.problem,  # PostgreSQL away: apologise directly, run again
            vault_connections=self.vault.connections,
        )
        self.intake = build_intake(
            self.config, vault=self.vault, store=self.intake_store, router=self.router,
            clock=self.clock, metrics=self.metrics, replica=self.replica.id,
            hints=self.fleet.hints, served=tuple(self.channel_map),
        )  # fmt: skip

    def channel_health(self) -> list[ChannelHealth]:
        found = [self.fleet.health(c) for c in self.channels if isinstance(c, ReportsHealth)]
        if self.intake.failing:  # the vault refuses inbound messages: the platforms redeliver
            found.append(ChannelHealth(channel="intake", connected=False, detail=INTAKE_DOWN))
        if (down := self.vault.problem()) is not None:  # PostgreSQL away: reconnecting
            found.append(ChannelHealth(channel="vault", connected=False, detail=down))
        model = self.model_health.report()
        return found if model is None else [*found, model]

    def _key_alerts(self) -> KeyAlerts:
        return KeyAlerts(
            health=self.model_health,
            admins=self.config.settings.auth.admins,
            channels=self.channel_map,
            conversations=self.conversations,
            delivery=self.delivery,
        )

    def _steps(self, c: Contributions) -> list[Step]:
        """The pipeline, in order: the one place it is put together."""
        s = self.config.settings
        return [
            dedupe_step(),
            auth_step(self.authorizer, self.inbound_log, self.replier, self.access),
            record_step(
                self.conversations,
                max_chars=s.router.max_message_chars,
                hooks=c.record_hooks,
                resumer=Resumer(
                    conversations=self.conversations,
                    outbox=self.outbox,
                    replier=self.replier,
                    max_age_ms=int(s.router.resume_max_age_minutes * 60_000),
                ),
            ),
            hooks_step(c.turn_hooks),
            command_step(self.commands, self.replier),
            *c.steps,
            agent_step(self.agent, self.replier),
        ]

    async def _mark_unreachable(self, chat: ChatRef) -> None:
        await self.conversations.mark_unreachable(chat, self.clock.now_ms())

    async def serve(self, stop: asyncio.Event) -> None:
        """Run channels and background services until `stop` is set, then shut down in order.

        A `FatalChannelError` (e.g. an invalid token) ends the app and is raised as itself,
        not wrapped in the task group's ExceptionGroup, so the CLI can print it in one line.
        """
        try:
            with frozen_heap():  # the startup heap, out of the collector's walks (`heap.py`)
                await self._serve(stop)
        except BaseExceptionGroup as group:
            fatal = group.subgroup(FatalChannelError)
            if fatal is None:
                raise
            leaf: BaseException = fatal
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            raise leaf from group

    async def _serve(self, stop: asyncio.Event) -> None:
        # What was saved but not finished before the last stop goes first, in arrival order.
        await self.intake.replay()
        async with asyncio.TaskGroup() as tg:
            intake = [
                tg.create_task(self.fleet.receive(c, self.intake), name=f"channel {c.name}")
                for c in self.channels
            ]
            background = [
                tg.create_task(job(), name="background")
                for job in [
                    *self.background,
                    *self.contributions.jobs,
                    *self.fleet.jobs(),
                    *self.intake.jobs(),
                ]
            ]
            background.append(tg.create_task(self.delivery.run(), name="resend"))
            background.append(tg.create_task(self._key_alerts().run(), name="key alerts"))
            # Housekeeping in wall-clock time, whatever clock the app runs on.
            background.append(
                tg.create_task(self.vault.run_checkpoints(asyncio.sleep), name="checkpoints")
            )
            background.append(
                tg.create_task(housekeeping(self.inbound_log, self.clock), name="housekeeping")
            )
            await stop.wait()
            log.info("stopping: no new messages; draining in-flight turns")
            for task in intake:
                task.cancel()
            if intake:
                await asyncio.wait(intake)
            await self.router.drain()
            await self.intake.close()  # chats still held go to other replicas now
            for task in background:
                task.cancel()
