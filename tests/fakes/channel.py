"""The channel seam: `MemoryChannel` records what it was asked to send and fails on cue;
`inbound()` builds a message; `Inbox` is an `on_inbound` handler that keeps what a channel
hands over."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from gateway.core.errors import DeliveryError
from gateway.core.messages import (
    ChatKind,
    ChatRef,
    Inbound,
    Outbound,
    RejectedInbound,
    SentReceipt,
    UserRef,
)
from gateway.core.ports import InboundHandler

_ids = itertools.count(1)


@dataclass
class MemoryChannel:
    """An in-memory channel. `fail_with` is consumed one error per send."""

    name: str = "memory"
    sent: list[Outbound] = field(default_factory=list)
    fail_with: deque[DeliveryError | Exception] = field(default_factory=deque)
    typing_calls: int = 0
    handler: InboundHandler | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def command_hint(self, command: str) -> str:
        return f"/{command}"

    async def typing(self, chat: ChatRef) -> None:
        self.typing_calls += 1

    async def send(self, out: Outbound) -> SentReceipt:
        if self.fail_with:
            raise self.fail_with.popleft()
        self.sent.append(out)
        return SentReceipt(platform_message_ids=(f"p{len(self.sent)}",))

    async def run(self, on_inbound: InboundHandler) -> None:
        self.handler = on_inbound
        self.started.set()
        await asyncio.Event().wait()

    def texts(self) -> list[str]:
        return [o.text for o in self.sent]


def inbound(
    text: str,
    *,
    chat: str = "c1",
    user: str = "u1",
    channel: str = "memory",
    message_id: str | None = None,
    kind: ChatKind = ChatKind.DM,
    mentioned: bool = False,
    thread: str | None = None,
) -> Inbound:
    return Inbound(
        chat=ChatRef(channel=channel, chat_id=chat, thread_id=thread),
        user=UserRef(channel=channel, user_id=user),
        text=text,
        message_id=message_id or f"m{next(_ids)}",
        kind=kind,
        mentioned=mentioned,
    )


class Inbox:
    """An `on_inbound` handler (the intake's shape) that keeps what a channel hands over;
    `wait(n)` for n of them. Like the intake it takes a batch, keeps it in order, and returns
    the turns' futures (here already done). `fail_with` makes the next saves raise, as a vault
    that cannot write would."""

    def __init__(self) -> None:
        self.items: list[Inbound] = []
        self.rejected: list[RejectedInbound] = []
        self.fail_with: list[Exception] = []
        self.arrived = asyncio.Condition()

    async def __call__(
        self, batch: Sequence[Inbound | RejectedInbound]
    ) -> list[asyncio.Future[None]]:
        if self.fail_with:
            raise self.fail_with.pop(0)
        for item in batch:
            if isinstance(item, RejectedInbound):
                self.rejected.append(item)
            else:
                self.items.append(item)
        async with self.arrived:
            self.arrived.notify_all()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return [done for item in batch if isinstance(item, Inbound)]

    async def wait(self, count: int) -> list[Inbound]:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.items) >= count), 5)
        return self.items
