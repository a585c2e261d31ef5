"""Ports: the Protocols the core talks to. Fakes in tests satisfy them structurally.

The router, agent and engine depend on these shapes only; `gateway/app.py` plugs in the
concrete Telegram, Slack and console channels, the Anthropic adapter and the system clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway.core.llm import LLMRequest, LLMResponse
from gateway.core.messages import (
    ChannelHealth,
    ChatRef,
    CommandInfo,
    Inbound,
    Outbound,
    SentReceipt,
    WebRequest,
    WebResponse,
)

# Called by a channel for each inbound message. Scheduling happens at call time (so the order
# of calls is the order of handling within a chat); awaiting the result waits for the reply.
InboundHandler = Callable[[Inbound], Awaitable[None]]


class Channel(Protocol):
    @property
    def name(self) -> str: ...

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
    """A route a component mounts on the app's HTTP server (`gateway/http.py`)."""

    method: str
    path: str
    handler: WebHandler


# Optional capabilities a channel may have; `gateway/app.py` checks them with isinstance.
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
