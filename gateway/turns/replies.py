"""Replying within a turn: build the `Outbound`, deliver it, record what was sent.

Idempotency keys derive from the inbound message (`chat:message:n`), so a redelivered inbound
that slipped past dedupe still cannot produce a second copy of the same reply. A reply is
recorded in the session only if it was (or may have been) delivered: the model's history
should match what the user saw. A reply the delivery had to queue (a long Retry-After, or an
earlier reply to the chat still waiting) ends the turn at once; it enters the history when
the background resend delivers it.

The typing indicator is best effort and never costs the reply anything: the channel gives
it its own small budget of connections (see the Telegram channel), and stopping it only
stops the refresh loop. It is first sent only once a turn has taken `TYPING_DELAY_S`: most
replies are ready sooner, and for them the indicator would be a second platform call per
message that the user never sees (the largest cost a turn added to the libraries underneath).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from gateway.agent.context import estimate_tokens
from gateway.core.messages import ChatRef, Inbound, Outbound, OutboundKind
from gateway.core.ports import Channel, Clock
from gateway.turns.commands import Hint
from gateway.turns.delivery import Delivery, DeliveryResult
from vault.conversations import Conversations
from vault.outbox import History

if TYPE_CHECKING:
    from gateway.turns.turn import Turn

log = logging.getLogger(__name__)

TYPING_DELAY_S = 0.5  # a reply ready sooner is not announced by a typing indicator
TYPING_REFRESH_S = 4.0  # platforms show the indicator for about 5 s


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
        history = None
        if recorded is not None:
            # The row carries where its text joins the history: it does when the row is sent
            # or turns uncertain (the user may have seen it), in this process or the next —
            # the model's history always matches what the user saw.
            history = History(
                session=recorded.session_pk,
                chat=recorded.chat_pk,
                kind=kind,
                tokens=estimate_tokens(text),
            )
        return await self.delivery.deliver(out, history=history)

    async def send_directly(self, turn: Turn, text: str) -> None:
        """A notice straight to the channel, one attempt, with no outbox row and no history:
        only for when the vault is away and the outbox cannot be written (`router.py`). The
        channel's delivery errors are raised as they are."""
        channel = self.channels.get(turn.inbound.chat.channel)
        if channel is None:
            return
        inbound = turn.inbound
        out = Outbound(
            chat=inbound.chat,
            text=text,
            idempotency_key=f"{reply_key_prefix(inbound)}{OutboundKind.NOTICE.value}:direct",
            reply_to=inbound.message_id or None,
            kind=OutboundKind.NOTICE,
        )
        await channel.send(out)

    @contextlib.asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """Keep the typing indicator alive while the body runs, from `TYPING_DELAY_S` on;
        always stop it."""
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
        await self.clock.sleep(TYPING_DELAY_S)
        while True:
            try:
                await channel.typing(chat)
            except Exception as exc:  # best effort: a failed indicator never fails the turn
                log.debug("typing indicator failed: %s", type(exc).__name__)
            await self.clock.sleep(TYPING_REFRESH_S)
