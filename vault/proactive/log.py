"""The proactive log: one row per proactive message, for quotas, engagement and `/why`.

There is no quota table: quotas are counts of log rows since a day boundary the caller computes
(the user's local midnight, or UTC midnight for the global quota). A row is written in the same
transaction as the outbox row (status `delivering`) and follows the send's outcome.

Engagement: a proactive message counts as engaged when its user writes in the chat it went to
within 24 h of it (a chat message, not a command; messages elsewhere and other people's
messages in a group do not count). The model can also record engagement it sees otherwise
("thanks for the reminder this morning" in another chat) with `proactive_engage` and the id
`/why` and `proactive_list` show. The rate over 30 days is what the model sees.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from vault.db import Vault
from vault.proactive.items import ItemStatus
from vault.proactive.tx import COUNTED, send_times_in

ENGAGEMENT_WINDOW_MS = 24 * 3600 * 1000
RATE_WINDOW_MS = 30 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class LastProactive:
    log_id: int
    type: str
    source_id: int
    sent_at: int
    status: ItemStatus
    engaged: bool
    what: str
    why: str
    confidence: float
    kind: str
    reason: str


def mark_engaged_in(raw: sqlite3.Connection, user: int, chat: int, now_ms: int) -> int:
    """Engage `user`'s proactive messages of the last 24 h in `chat`, in the caller's
    transaction.

    Runs for every chat message (a record hook), so it is one indexed UPDATE that usually
    matches nothing, executed inside the transaction that records the message.
    """
    return raw.execute(
        """UPDATE proactive_log SET engaged = 1, engaged_at = ?
           WHERE user = ? AND engaged = 0 AND sent_at >= ? AND sent_at <= ? AND chat = ?
             AND status IN ('sent', 'uncertain')""",
        (now_ms, user, now_ms - ENGAGEMENT_WINDOW_MS, now_ms, chat),
    ).rowcount


def engagement_record_hook(
    raw: sqlite3.Connection, user: int, chat: int, kind: str, now_ms: int
) -> None:
    """A `RecordHook`: a chat message (not a command) engages the recent proactive messages
    of its chat."""
    if kind == "chat":
        mark_engaged_in(raw, user, chat, now_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecentMessage:
    id: int  # the log id: what `/why`, `proactive_list` and `proactive_engage` call it
    chat: int
    sent_at: int
    status: ItemStatus
    engaged: bool
    text: str


@dataclass(frozen=True, slots=True)
class PendingIntent:
    id: int
    chat: int
    execute_at: int
    what: str


@dataclass(frozen=True, slots=True)
class Overview:
    used_today: int
    engagement_rate: float | None
    pending: list[PendingIntent]


class ProactiveLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    # Single statements on the read connection (each is its own consistent snapshot): no
    async def sends_since(self, *, user: int | None, since_ms: int) -> int:
        sql = f"SELECT count(*) FROM proactive_log WHERE sent_at >= ? AND status IN {COUNTED}"
        params: list[int] = [since_ms]
        if user is not None:
            sql += " AND user = ?"
            params.append(user)
        return int(await self.vault.scalar(sql, params))

    async def send_times(self, users: Sequence[int], since_ms: int) -> dict[int, list[int]]:
        """`sent_at` of each user's quota-counted messages since `since_ms` (read connection)."""
        return await self.vault.read(lambda raw: send_times_in(raw, users, since_ms))

    async def mark_engaged(self, user: int, chat: int, now_ms: int) -> int:
        """The user wrote in `chat`: engage their proactive messages there of the last 24 h.
        Returns rows."""
        return await self.vault.run(lambda raw: mark_engaged_in(raw, user, chat, now_ms))

    async def overview(
        self, user: int, *, day_start_ms: int, now_ms: int, pending: int = 0
    ) -> Overview:
        """Today's quota use, the 30-day engagement rate and (if asked) the first `pending`
        follow-ups — one statement, since the context pipeline asks on every message."""
        row = await self.vault.fetchone(
            """SELECT
                  (SELECT count(*) FROM proactive_log WHERE user = ? AND sent_at >= ?
                     AND status IN ('delivering', 'sent', 'uncertain')),
                  count(*), coalesce(sum(engaged), 0),
                  (SELECT json_group_array(json_array(id, chat, execute_at, what)) FROM (
                     SELECT id, chat, execute_at, what FROM proactive_intents
                     WHERE user = ? AND status = 'pending' ORDER BY execute_at LIMIT ?))
                FROM proactive_log WHERE user = ? AND sent_at >= ? AND status = 'sent'""",
            (user, day_start_ms, user, pending, user, now_ms - RATE_WINDOW_MS),
        )
        assert row is not None
        total, engaged = int(row[1]), int(row[2])
        listed = [
            PendingIntent(int(i), int(chat), int(at), str(what))
            for i, chat, at, what in json.loads(row[3])
        ]
        return Overview(used_today=int(row[0]), engagement_rate=engaged / total if total else None,
                        pending=listed)  # fmt: skip

    async def mark_engaged_id(self, log_id: int, now_ms: int, user: int | None = None) -> bool:
        """Engage one delivered (or possibly delivered) message; only `user`'s, if given."""
        sql = """UPDATE proactive_log SET engaged = 1, engaged_at = ?
                 WHERE id = ? AND engaged = 0 AND status IN ('sent', 'uncertain')"""
        params: tuple[int, ...] = (now_ms, log_id)
        if user is not None:
            sql += " AND user = ?"
            params += (user,)
        return await self.vault.write_rowcount(sql, params) == 1

    async def recent(self, user: int, *, since_ms: int, chat: int | None = None,
                     limit: int = 10) -> list[RecentMessage]:  # fmt: skip
        """The user's proactive messages since `since_ms` (in `chat`, if given), newest first."""
        where = " AND l.chat = ?" if chat is not None else ""
        params: tuple[int, ...] = (user, since_ms) + ((chat,) if chat is not None else ())
        rows = await self.vault.fetchall(
            f"""SELECT l.id, l.chat, l.sent_at, l.status, l.engaged, coalesce(o.text, '')
                FROM proactive_log l LEFT JOIN outbox o ON o.id = l.outbox_id
                WHERE l.user = ? AND l.sent_at >= ? AND l.status IN ('sent', 'uncertain')
                {where} ORDER BY l.sent_at DESC, l.id DESC LIMIT ?""",
            (*params, limit),
        )
        return [
            RecentMessage(id=int(r[0]), chat=int(r[1]), sent_at=int(r[2]),
                          status=ItemStatus(r[3]), engaged=bool(r[4]), text=str(r[5]))
            for r in rows
        ]  # fmt: skip

    async def engagement_rate(self, user: int | None, now_ms: int) -> float | None:
        """Share of delivered proactive messages the user answered (30 days); None if none."""
        sql = """SELECT count(*), coalesce(sum(engaged), 0) FROM proactive_log
                 WHERE sent_at >= ? AND status = 'sent'"""
        params: list[int] = [now_ms - RATE_WINDOW_MS]
        if user is not None:
            sql += " AND user = ?"
            params.append(user)
        row = await self.vault.fetchone(sql, params)
        assert row is not None
        total, engaged = int(row[0]), int(row[1])
        return engaged / total if total else None

    async def last(self, user: int, chat: int | None = None) -> LastProactive | None:
        """The user's most recent proactive message (in `chat`, if given) and the item behind
        it, for `/why`."""
        row = await self.vault.fetchone(
            """SELECT l.id, l.type, l.source_id, l.sent_at, l.status, l.engaged,
                      coalesce(i.what, t.context) AS what, coalesce(i.why, t.type) AS why,
                      coalesce(i.confidence, 1.0) AS confidence,
                      coalesce(i.kind, t.type) AS kind, coalesce(i.reason, t.reason) AS reason
               FROM proactive_log l
               LEFT JOIN proactive_intents i ON l.type = 'intent' AND i.id = l.source_id
               LEFT JOIN proactive_triggers t ON l.type = 'trigger' AND t.id = l.source_id
               WHERE l.user = ? AND (? IS NULL OR l.chat = ?)
               ORDER BY l.sent_at DESC, l.id DESC LIMIT 1""",
            (user, chat, chat),
        )
        if row is None:
            return None
        return LastProactive(
            log_id=row[0],
            type=row[1],
            source_id=row[2],
            sent_at=row[3],
            status=ItemStatus(row[4]),
            engaged=bool(row[5]),
            what=row[6] or "",
            why=row[7] or "",
            confidence=float(row[8]),
            kind=row[9] or "",
            reason=row[10] or "",
        )
