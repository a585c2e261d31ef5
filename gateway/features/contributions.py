"""What a feature may add to Iris, and what it may use: the feature seam.

A feature is an object with a `name` and `contribute(c)`. The composition root
(`gateway/app/app.py`) builds the core (vault, stores, agent, delivery, chat locks), hands
every feature one `Contributions`, and then applies what they registered, in one visible place:

- `command` — slash commands (`gateway/turns/commands.py`);
- `tool` — model tools (`gateway/agent/tools.py`), scoped by the gateway;
- `provider` — context providers for the pipeline (`gateway/agent/context.py`);
- `record_hook` — SQL run in the transaction that records an inbound message;
- `turn_hook` — side effects of a user writing, after recording (commands included);
- `step` — turn steps, run after commands and before the agent, in feature order;
- `background` — long-lived jobs run under the app's task group until shutdown;
- `admin` — `/admin` subcommands; `proactive_ops` — the engine's admin API operations;
- `route` — HTTP routes on the app's server; `gauge` — `/metrics` gauges read at scrape time;
- `api_read` — a `GET` endpoint of the admin API (its bearer token, audit and OpenAPI document);
  `api_write` — a `POST` one, with a validated JSON body; `api_route` — any method, with path
  parameters, a validated query and/or body, or a server-sent event stream;
- `stats` — a section of `/admin stats` and `GET /stats`;
- `call_guard` — the check every model call passes before it is made (spending limits).

Nothing here writes attributes of `App`: a feature keeps what it built on itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from gateway.agent.context import ContextPipeline, Provider
from gateway.agent.tools import Tool, ToolRegistry
from gateway.agent.traces import TraceStore
from gateway.core.admin_ops import JSON, ProactiveOps
from gateway.core.budget import CallGuard
from gateway.core.llm import LLMRequest, LLMResponse
from gateway.core.metrics import GaugeReader, Metrics
from gateway.core.ports import Clock, WebRoute
from gateway.turns.commands import Command, CommandCall, Hint
from gateway.turns.delivery import Delivery
from gateway.turns.locks import ChatLocks
from gateway.turns.shared_intake import Hints
from gateway.turns.turn import Step, TurnHook
from vault.conversations import Conversations, RecordHook
from vault.db import Vault
from vault.memories import Memories

BackgroundJob = Callable[[], Coroutine[Any, Any, None]]
# A contributed stats section: since_ms -> JSON-able figures.
StatsSection = Callable[[int], Awaitable[dict[str, Any]]]
AdminHandler = Callable[[CommandCall, str], Awaitable[str]]
# `Agent.call`: one recorded model call for a chat key (raises ModelNotConfigured without one).
ModelCall = Callable[[LLMRequest, str | None], Awaitable[LLMResponse]]


@dataclass(frozen=True, slots=True)
class AdminSub:
    """`/admin <name> <args>`: the handler gets the call and the text after the name."""

    name: str
    usage: str
    summary: str
    handler: AdminHandler


@dataclass(frozen=True, slots=True)
class ApiRead:
    """`GET <path>[?user=<key>]` on the admin API: the handler gets the validated user key
    (or None) and returns JSON; `NotFound` is a 404."""

    path: str
    summary: str
    handler: Callable[[str | None], Awaitable[JSON]]
    user_required: bool = False
    takes_user: bool = True  # False: no `user` parameter (the handler always gets None)

    @property
    def user_query(self) -> bool | None:
        """The document's `user` parameter: None (none), else whether it is required."""
        return self.user_required if self.takes_user else None


@dataclass(frozen=True, slots=True)
class ApiWrite:
    """`POST <path>` on the admin API: the handler gets the body validated against `body`
    (422 otherwise) and returns JSON; `UserInputError` is a 400, `NotFound` a 404."""

    path: str
    summary: str
    body: type[BaseModel]
    handler: Callable[[Any], Awaitable[JSON]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiCall:
    """What an `ApiRoute` handler gets: its path parameters (each matched its pattern), the
    validated query and body (None without a model), and the request's headers."""

    params: Mapping[str, str]
    query: BaseModel | None
    body: BaseModel | None
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One server-sent event: `id` (what a client resumes from with `Last-Event-ID`) and
    its `data` (one line of JSON)."""

    id: str
    data: str


# A stream of events; None is a keep-alive comment (it also finds a client that went away).
EventStream = AsyncGenerator[StreamEvent | None, None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiRoute:
    """An admin API operation of any method: `path` may hold `{name}` parameters, each
    matched by its pattern in `params` (422 otherwise); `query` and `body` are validated
    like every body (422 with field errors). `handler` answers JSON with `status`; a `stream`
    route answers `text/event-stream` instead, once `stream(call)` returned (it raises
    `NotFound` before anything is sent). `NotFound` is 404, `WrongState` 409, any other
    `UserInputError` 400."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    summary: str
    handler: Callable[[ApiCall], Awaitable[JSON]] | None = None
    stream: Callable[[ApiCall], Awaitable[EventStream]] | None = None
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    status: int = 200
    response: type[BaseModel] | None = None
    errors: tuple[int, ...] = (404,)


@dataclass(frozen=True, slots=True)
class Gauge:
    name: str
    help: str
    labels: tuple[str, ...]
    read: GaugeReader
    kind: str = "gauge"


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """The core pieces a feature may use; built once by the composition root."""

    vault: Vault
    conversations: Conversations
    memories: Memories
    clock: Clock
    metrics: Metrics
    call_model: ModelCall
    model_configured: bool
    delivery: Delivery
    chat_locks: ChatLocks
    hint_for: Callable[[str], Hint]
    # The context pipeline (providers on/off, priorities) and the trace of each chat's last
    # request, for features that report or steer what the model is given.
    pipeline: ContextPipeline
    traces: TraceStore
    # Every model tool, complete once all features contributed (the proactive gate offers the
    # ones marked `proactive`).
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    # This process among the replicas sharing the vault (`gateway/core/replica.py`): what
    # periodic jobs record as the runner of a time slot (`vault/periodic.py`).
    replica_id: str = ""
    # Wake-up hints between replicas on a NOTIFY channel (PostgreSQL; None on SQLite, one
    # process): a listener whose state `/healthz` and `/metrics` show (`gateway/app/replicas.py`).
    hints: Callable[[str], Hints | None] = lambda channel: None


@dataclass
class Contributions:
    services: Services
    commands: list[Command] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    providers: list[Provider] = field(default_factory=list)
    record_hooks: list[RecordHook] = field(default_factory=list)
    turn_hooks: list[TurnHook] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    jobs: list[BackgroundJob] = field(default_factory=list)
    admin_subs: list[AdminSub] = field(default_factory=list)
    routes: list[WebRoute] = field(default_factory=list)
    gauges: list[Gauge] = field(default_factory=list)
    stats_sections: dict[str, StatsSection] = field(default_factory=dict)
    ops: ProactiveOps | None = None
    api_reads: list[ApiRead] = field(default_factory=list)
    api_writes: list[ApiWrite] = field(default_factory=list)
    api_routes: list[ApiRoute] = field(default_factory=list)
    guard: CallGuard | None = None

    def command(self, *commands: Command) -> None:
        self.commands.extend(commands)

    def tool(self, *tools: Tool) -> None:
        self.tools.extend(tools)

    def provider(self, *providers: Provider) -> None:
        self.providers.extend(providers)

    def record_hook(self, hook: RecordHook) -> None:
        self.record_hooks.append(hook)

    def turn_hook(self, hook: TurnHook) -> None:
        self.turn_hooks.append(hook)

    def step(self, step: Step) -> None:
        self.steps.append(step)

    def background(self, job: BackgroundJob) -> None:
        self.jobs.append(job)

    def admin(self, *subs: AdminSub) -> None:
        self.admin_subs.extend(subs)

    def route(self, *routes: WebRoute) -> None:
        self.routes.extend(routes)

    def gauge(self, gauge: Gauge) -> None:
        self.gauges.append(gauge)

    def stats(self, name: str, section: StatsSection) -> None:
        if name in self.stats_sections:
            raise ValueError(f"stats section {name!r} contributed twice")
        self.stats_sections[name] = section

    def api_read(self, read: ApiRead) -> None:
        self.api_reads.append(read)

    def api_write(self, write: ApiWrite) -> None:
        self.api_writes.append(write)

    def api_route(self, *routes: ApiRoute) -> None:
        self.api_routes.extend(routes)

    def call_guard(self, guard: CallGuard) -> None:
        if self.guard is not None:
            raise ValueError("a call guard contributed twice")
        self.guard = guard

    def proactive_ops(self, ops: ProactiveOps) -> None:
        if self.ops is not None:
            raise ValueError("proactive operations contributed twice")
        self.ops = ops


class Feature(Protocol):
    @property
    def name(self) -> str: ...

    def contribute(self, c: Contributions) -> None:
        """Register what the feature adds; called once, before the router is built."""
