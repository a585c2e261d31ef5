"""Proactive items as the engine sees them: the row types and their SQL.

An `Item` is an intent or a trigger joined with its chat and user (zone, settings, last seen),
so one claim gives the engine everything the policy and the gate need. `ItemStatus` is the
lifecycle both tables share (the `status` column), defined here because the vault owns it.
Split from `vault/proactive/store.py` (the store) to keep both modules small.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from gateway.core.messages import ChatRef
from vault.db import Tx

Source = Literal["intent", "trigger"]
TABLES: dict[str, str] = {"intent": "proactive_intents", "trigger": "proactive_triggers"}


class ItemStatus(StrEnum):
    """An intent's or trigger's state, as the `status` column stores it.

    `pending` until it runs (a claim leases a pending row; it does not change its status),
    `delivering` once its outbox row is written, then exactly one terminal state. The proactive
    log's rows use the delivery part of it (`delivering`, `sent`, `failed`, `uncertain`).
    """

    PENDING = "pending"
    DELIVERING = "delivering"
    SENT = "sent"
    SKIPPED = "skipped"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    FAILED = "failed"
    UNCERTAIN = "uncertain"


TERMINAL = (
    ItemStatus.SENT,
    ItemStatus.SKIPPED,
    ItemStatus.EXPIRED,
    ItemStatus.CANCELLED,
    ItemStatus.FAILED,
    ItemStatus.UNCERTAIN,
)
TRIGGER_TYPES = ("dormant_user", "unanswered", "engagement_drop", "external")

ITEM_SELECT = {
    "intent": """SELECT 'intent' AS source, i.id, i.chat, i.user, i.what, i.why, i.confidence,
        i.kind, i.exact_time, i.execute_at, i.due_at, i.created_at, i.attempts, i.deferrals,
        i.claim, i.status""",
    "trigger": """SELECT 'trigger' AS source, i.id, i.chat, i.user, i.context AS what,
        i.type AS why, 1.0 AS confidence, i.type AS kind, 0 AS exact_time, i.execute_at,
        i.due_at, i.created_at, i.attempts, i.deferrals, i.claim, i.status""",
}
TARGET_COLUMNS = """, c.channel, c.chat_id, c.thread_id, c.unreachable_ms, c.kind AS chat_kind,
        u.display_name, u.user_id, u.timezone, u.settings, u.last_seen_ms"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """One claimed (or listed) intent or trigger, with what the engine needs to act on it."""

    source: Source
    id: int
    chat_pk: int
    user_pk: int
    what: str
    why: str
    confidence: float
    kind: str  # 'ai' | 'user_reminder' for intents, the trigger type for triggers
    exact_time: bool
    execute_at: int
    due_at: int
    created_at: int
    attempts: int
    deferrals: int
    claim: str | None
    status: ItemStatus
    chat: ChatRef
    chat_unreachable: bool
    in_group: bool  # a group reads what is sent: nothing private of the user's goes into it
    user_name: str
    user_id: str  # the platform's id (`UserRef.user_id`) on the chat's channel
    timezone: str | None
    settings: dict[str, Any]
    last_seen_ms: int

    @property
    def key(self) -> str:
        return f"{self.source}:{self.id}"

    @property
    def is_reminder(self) -> bool:
        return self.source == "intent" and self.kind == "user_reminder"


def item_from_row(row: Any) -> Item:
    return Item(
        source=row["source"],
        id=row["id"],
        chat_pk=row["chat"],
        user_pk=row["user"],
        what=row["what"],
        why=row["why"],
        confidence=float(row["confidence"]),
        kind=row["kind"],
        exact_time=bool(row["exact_time"]),
        execute_at=row["execute_at"],
        due_at=row["due_at"],
        created_at=row["created_at"],
        attempts=row["attempts"],
        deferrals=row["deferrals"],
        claim=row["claim"],
        status=ItemStatus(row["status"]),
        chat=ChatRef(
            channel=row["channel"], chat_id=row["chat_id"], thread_id=row["thread_id"] or None
        ),
        chat_unreachable=row["unreachable_ms"] is not None,
        in_group=row["chat_kind"] == "group",
        user_name=row["display_name"] or row["user_id"],
        user_id=row["user_id"],
        timezone=row["timezone"],
        settings=json.loads(row["settings"]),
        last_seen_ms=row["last_seen_ms"],
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaCheck:
    """Re-checked inside the delivery transaction, so two runs can't both take the last slot
    (nor two of one user's items, in two chats, both go out within the spacing)."""

    user_since_ms: int
    user_limit: int
    global_since_ms: int
    global_limit: int
    spacing_ms: int = 0  # 0: no spacing between this user's messages


@dataclass(frozen=True, slots=True)
class Blocked:
    """`begin_delivery` wrote nothing: a quota is used up, or the user's last proactive message
    (at `last_send_ms`) is more recent than the spacing allows."""

    reason: Literal["quota", "spacing"]
    last_send_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivering:
    """A row in `delivering`, with the status of its outbox row, for reconciliation."""

    item: Item
    outbox_id: int
    outbox_status: str
    lease_until: int
    text: str


class LostClaim(Exception):
    """`begin_delivery` rolled back: the row changed hands (lease expired, taken over)."""


async def add_trigger_in(tx: Tx, values: tuple[Any, ...]) -> int | None:
    row = await tx.fetchone(
        """INSERT OR IGNORE INTO proactive_triggers
               (type, chat, user, context, source_key, execute_at, due_at, created_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
        values,
    )
    return None if row is None else int(row[0])
