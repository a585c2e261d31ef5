"""Ports: the Protocols the core talks to. Fakes in tests satisfy them structurally.

The router, agent and engine depend on these shapes only; `gateway/app/app.py` plugs in the
concrete Telegram, Slack and console channels, the Anthropic adapter and the system clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from gateway.core.llm import LLMRequest, LLMResponse
from gateway.core.messages import (
    ChannelHealth,
    ChatRef,
    CommandInfo,
    Inbound,
    Outbound,
    RejectedInbound,
    SentReceipt,
    WebRequest,
    WebResponse,
)

# The intake (`gateway/turns/intake.py`): a channel awaits it with each batch of deliveries,
# in arrival order, BEFORE confirming them to its platform (Telegram's next offset, a
# webhook's 200, Slack's ack). It returns once the batch is saved, with its turns scheduled
# (not answered: a receive loop must not wait for a model call); the futures complete when
# the turns end, and the router tracks and logs them, so the channel need not keep them. If
# it raises `VaultError`, the batch was not saved: do not confirm it (the platform
# redelivers). A delivery that cannot be translated goes in as a `RejectedInbound`, so it is
# recorded with its reason and confirmed, never redelivered forever.
InboundHandler = Callable[
    [Sequence[Inbound | RejectedInbound]], Awaitable[Sequence[asyncio.Future[None]]]
]


class Channel(Protocol):
    """A chat platform. The app opens it (`async with`) before `run` and closes it after the
    last send; a channel that holds nothing returns itself and closes nothing."""

    @property
    def name(self) -> str: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...

    async def run(self, on_inbound: InboundHandler) -> None:
        """Receive messages until cancelled. Raise FatalChannelError if it can never work."""

    async def send(self, out: Outbound) -> SentReceipt:
        """Deliver one message; raise a DeliveryError subclass on failure."""

    async def typing(self, chat: ChatRef) -> None:
        """Show a short-lived typing indicator (best effort)."""

    def command_hint(self, command: str) -> str:
        """How a user types `command` on this platform (`/clear`, or `/iris clear` on Slack)."""


WebHandler = Callable[[WebRequest], Awaitable[WebResponse]]


@dataclass(frozen=True, slots=True)
class WebRoute:
    """A route a component mounts on the app's HTTP server (`gateway/admin/http.py`)."""

    method: str
    path: str
    handler: WebHandler


# Optional capabilities a channel may have; `gateway/app/app.py` checks them with isinstance.
@runtime_checkable
class ReportsHealth(Protocol):
    def health(self) -> ChannelHealth: ...


@runtime_checkable
class ServesRoutes(Protocol):
    def routes(self) -> Sequence[WebRoute]:
        """Routes to mount on the HTTP server (webhooks); empty when not needed."""


@runtime_checkable
class TakesCommands(Protocol):
    def use_commands(self, commands: Sequence[CommandInfo]) -> None:
        """The user commands, for platform menus; called once before `run`."""


@runtime_checkable
class ChecksCredentials(Protocol):
    async def check_credentials(self) -> str:
        """Ask the platform who we are (`iris doctor --online`); raise FatalChannelError if the
        credentials are rejected, ChannelUnavailable if the platform cannot be reached."""


class LLM(Protocol):
    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One model call; raise a ModelError subclass on failure."""


class Clock(Protocol):
    def now_ms(self) -> int: ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, when_ms: int) -> None: ...
