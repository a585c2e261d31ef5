"""Replying within a turn: build the `Outbound`, deliver it, record what was sent.

Idempotency keys derive from the inbound message (`chat:message:n`), so a redelivered inbound
that slipped past dedupe still cannot produce a second copy of the same reply. A reply is
recorded in the session only if it was (or may have been) delivered: the model's history
should match what the user saw. A reply the delivery had to queue (a long Retry-After, or an
earlier reply to the chat still waiting) ends the turn at once; it enters the history when
the background resend delivers it.

The typing indicator is best effort and never costs the reply anything: the channel gives
it its own small budget of connections (see the Telegram channel), and stopping it only
stops the refresh loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from gateway.agent.context import estimate_tokens
from gateway.core.messages import ChatRef, Inbound, Outbound, OutboundKind
from gateway.core.ports import Channel, Clock
from gateway.turns.commands import Hint
from gateway.turns.delivery import Delivery, DeliveryResult, DeliveryStatus
from vault.conversations import Conversations, insert_message

if TYPE_CHECKING:
    from gateway.turns.turn import Turn

log = logging.getLogger(__name__)

TYPING_REFRESH_S = 4.0


def default_hint(command: str) -> str:
    return f"/{command}"


def reply_key_prefix(inbound: Inbound) -> str:
    """What every reply to `inbound` has its idempotency key start with."""
    return f"{inbound.chat.key}:{inbound.message_id}:"


class Replier:
    def __init__(
        self,
        *,
        delivery: Delivery,
        conversations: Conversations,
        channels: Mapping[str, Channel],
        clock: Clock,
    ) -> None:
        self.delivery = delivery
        self.conversations = conversations
        self.channels = channels
        self.clock = clock

    def hint_for(self, channel: str) -> Hint:
        found = self.channels.get(channel)
        return found.command_hint if found is not None else default_hint

    async def send(
        self,
        turn: Turn,
        text: str,
        *,
        kind: str = "chat",
        out_kind: OutboundKind = OutboundKind.REPLY,
    ) -> DeliveryResult:
        turn.replies += 1
        inbound = turn.inbound
        out = Outbound(
            chat=inbound.chat,
            text=text,
            idempotency_key=f"{reply_key_prefix(inbound)}{out_kind.value}:{turn.replies}",
            reply_to=inbound.message_id or None,
            kind=out_kind,
        )
        recorded = turn.recorded
        tokens = estimate_tokens(text)
        record = None
        if recorded is not None:
            # The reply enters the history in the transaction that marks it sent: the
            # model's history always matches what the user saw.
            def record(raw: sqlite3.Connection) -> None:
                insert_message(
                    raw,
                    session=recorded.session_pk,
                    chat=recorded.chat_pk,
                    user=None,
                    role="assistant",
                    kind=kind,
                    text=text,
                    tokens=tokens,
                    now_ms=self.clock.now_ms(),
                )

        result = await self.delivery.deliver(out, on_sent=record)
        if recorded is not None and result.status is DeliveryStatus.UNCERTAIN:  # may have been seen
            await self.conversations.record_reply(
                session=recorded.session_pk,
                chat=recorded.chat_pk,
                kind=kind,
                text=text,
                tokens=tokens,
                now_ms=self.clock.now_ms(),
            )
        return result

    @contextlib.asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """Keep the typing indicator alive while the body runs; always stop it."""
        channel = self.channels.get(chat.channel)
        if channel is None:
            yield
            return
        task = asyncio.create_task(self._keep_typing(channel, chat))
        try:
            yield
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait([task])  # waits without re-raising the task's cancellation

    async def _keep_typing(self, channel: Channel, chat: ChatRef) -> None:
        while True:
            try:
                await channel.typing(chat)
            except Exception as exc:  # best effort: a failed indicator never fails the turn
                log.debug("typing indicator failed: %s", type(exc).__name__)
            await self.clock.sleep(TYPING_REFRESH_S)
