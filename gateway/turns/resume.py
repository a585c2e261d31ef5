"""What a replayed message needs after a restart: resumed, found answered, or too old.

The intake replays every message saved but not finished before the process stopped
(`gateway/turns/intake.py`). The record step records it as usual when it never got that far;
when its dedupe keys say it was recorded already, the record step asks here:

- answered already (an outbox row carries its reply key, whatever that row's state) — the
  turn ends: nothing is sent twice;
- recorded, unanswered and recent — the turn resumes from after recording with the ids it was
  recorded under (hooks that count messages are not run again);
- older than `[router] resume_max_age_minutes` (by the platform's timestamp), recorded or not —
  the user gets a short notice that it was not processed, instead of a late answer to a
  question they may have moved on from.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from gateway.core.messages import OutboundKind
from gateway.turns.replies import Replier, reply_key_prefix
from gateway.turns.turn import Turn
from vault.conversations import Conversations, Recorded
from vault.outbox import Outbox

log = logging.getLogger(__name__)

TOO_OLD = (
    "Sorry — I restarted before I could answer your message from {when} UTC, and it is too "
    "old to answer now. It is saved; send it again if it still matters."
)


class Resumer:
    def __init__(
        self, *, conversations: Conversations, outbox: Outbox, replier: Replier, max_age_ms: int
    ) -> None:
        self.conversations = conversations
        self.outbox = outbox
        self.replier = replier
        self.max_age_ms = max_age_ms

    def too_old(self, turn: Turn) -> bool:
        at = turn.inbound.at_ms
        return at > 0 and turn.now_ms - at > self.max_age_ms

    async def notify_too_old(self, turn: Turn) -> None:
        when = datetime.fromtimestamp(turn.inbound.at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")
        log.info("replayed message %s is too old to answer", turn.inbound.message_id)
        await self.replier.send(
            turn, TOO_OLD.format(when=when), kind="notice", out_kind=OutboundKind.NOTICE
        )

    async def pick_up(self, turn: Turn) -> Recorded | None:
        """The recorded message to resume, or None when the turn is over (answered, gone, or
        told it was too old)."""
        found = await self.conversations.find_recorded(turn.inbound)
        if found is None:
            log.info("replayed message %s was a duplicate delivery", turn.inbound.message_id)
            return None
        if await self.outbox.has_key_prefix(reply_key_prefix(turn.inbound)):
            return None
        if self.too_old(turn):
            turn.recorded = found
            await self.notify_too_old(turn)
            return None
        log.info("resuming message %s after a restart", turn.inbound.message_id)
        return found
