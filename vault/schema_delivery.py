"""Schema for delivery in order per chat (`vault/outbox.py`): an index of the outbox rows still
open (pending or being sent), by chat.

Delivery asks two things on every reply and on every pass of the background resend: "does
this chat still have an earlier message waiting?" and "which waiting message is first in its
chat?". Open rows are a handful while the table keeps every message ever sent, so a partial
index over the open ones keeps both questions cheap however large the outbox grows.
"""

from __future__ import annotations

from vault.schema import Migration

DELIVERY_ORDER = Migration(
    "delivery_order",
    (
        """CREATE INDEX outbox_open ON outbox (channel, chat_id, thread_id, id)
            WHERE status IN ('pending', 'sending')""",
    ),
)
