"""Ports: the Protocols the core talks to. Fakes in tests satisfy them structurally.

The router, agent and engine depend on these shapes only; `gateway/app.py` plugs in the
concrete Telegram, Slack and console channels, the Anthropic adapter and the system clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.llm import LLMRequest, LLMResponse
from gateway.messages import ChatRef, Inbound, Outbound, SentReceipt

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


class LLM(Protocol):
    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One model call; raise a ModelError subclass on failure."""


class Clock(Protocol):
    def now_ms(self) -> int: ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, when_ms: int) -> None: ...
