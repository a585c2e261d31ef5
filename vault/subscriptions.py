"""The subscription store: subscriptions, their events, webhook delivery state and feedback
(schema in `vault/schema_subscriptions.py`).

Events are durable first: `add_events` writes the rows (and the subscription's
`last_triggered_ms`) in one write, and only then does anyone deliver them — a webhook from the
`queued` rows, SSE and poll from `seq`. A webhook failure bumps the subscription's consecutive
failure count in the same write that reschedules or fails the event; a success resets it.
The visibility reads (`memory_owners`, `followup_owners`, `document_scopes`, `chat_kinds`)
let the privacy filter check every item against the chat an event concerns, from the rows.

On PostgreSQL, replicas share these rows: the write that stores events sends a NOTIFY on
`EVENT_HINTS` with the subscription's id, and a write that changes a subscription (created,
deleted, enabled, disabled) one with `CHANGED`, both delivered at commit — wake-up hints for
the other replicas' streams and trigger caches (`gateway/subscriptions/hints.py`), never data.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vault.db import Vault

EVENT_HINTS = "iris_events"  # the NOTIFY channel: a subscription's id, or CHANGED
CHANGED = "*"  # the payload saying the subscriptions themselves changed (ids start "sub_")

_COLUMNS = """id, owner, patterns, callback, url, secret, min_relevance, max_per_trigger,
    cooldown_ms, chats, users, enabled, disabled_reason, failures, last_triggered_ms,
    created_ms"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionRow:
    id: str
    owner: str
    patterns: list[dict[str, Any]]
    callback: str
    url: str | None
    secret: str | None
    min_relevance: float
    max_per_trigger: int
    cooldown_ms: int
    chats: list[str]
    users: list[str]
    enabled: bool
    disabled_reason: str | None
    failures: int
    last_triggered_ms: int | None
    created_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRow:
    seq: int
    id: str
    subscription: str
    chat: str
    payload: dict[str, Any]
    status: str
    delivery: str
    attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvent:
    id: str
    chat: str
    payload: dict[str, Any]


def _subscription(row: Any) -> SubscriptionRow:
    return SubscriptionRow(
        id=row["id"],
        owner=row["owner"],
        patterns=json.loads(row["patterns"]),
        callback=row["callback"],
        url=row["url"],
        secret=row["secret"],
        min_relevance=row["min_relevance"],
        max_per_trigger=row["max_per_trigger"],
        cooldown_ms=row["cooldown_ms"],
        chats=json.loads(row["chats"]),
        users=json.loads(row["users"]),
        enabled=bool(row["enabled"]),
        disabled_reason=row["disabled_reason"],
        failures=row["failures"],
        last_triggered_ms=row["last_triggered_ms"],
        created_ms=row["created_ms"],
    )


def _event(row: Any) -> EventRow:
    return EventRow(
        seq=row["seq"],
        id=row["id"],
        subscription=row["subscription"],
        chat=row["chat"],
        payload=json.loads(row["payload"]),
        status=row["status"],
        delivery=row["delivery"],
        attempts=row["attempts"],
    )


class SubscriptionStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self._hints = vault.dialect == "postgresql"

    def _hint(self, raw: sqlite3.Connection, payload: str) -> None:
        """Wake the other replicas' listeners at commit (PostgreSQL only: one process else)."""
        if self._hints:
            raw.execute("SELECT pg_notify(?, ?)", (EVENT_HINTS, payload))

    async def create(self, row: SubscriptionRow) -> None:
        def body(raw: sqlite3.Connection) -> None:
            raw.execute(
                f"INSERT INTO subscriptions ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.id, row.owner, json.dumps(row.patterns), row.callback, row.url,
                    row.secret, row.min_relevance, row.max_per_trigger, row.cooldown_ms,
                    json.dumps(row.chats), json.dumps(row.users), int(row.enabled),
                    row.disabled_reason, row.failures, row.last_triggered_ms, row.created_ms,
                ),
            )  # fmt: skip
            self._hint(raw, CHANGED)

        await self.vault.run(body)

    async def get(self, sub_id: str) -> SubscriptionRow | None:
        row = await self.vault.fetchone(
            f"SELECT {_COLUMNS} FROM subscriptions WHERE id = ? AND deleted_ms IS NULL",
            (sub_id,),
        )
        return None if row is None else _subscription(row)

    async def listing(self, owner: str | None = None) -> list[SubscriptionRow]:
        """Live subscriptions, oldest first; of one owner when given."""
        rows = await self.vault.fetchall(
            f"SELECT {_COLUMNS} FROM subscriptions WHERE deleted_ms IS NULL "
            "AND (? IS NULL OR owner = ?) ORDER BY created_ms, rowid",
            (owner, owner),
        )
        return [_subscription(r) for r in rows]

    async def delete(self, sub_id: str, now_ms: int) -> bool:
        """Soft-delete; its queued webhook deliveries stop. False if it was not live."""

        def body(raw: sqlite3.Connection) -> bool:
            done = raw.execute(
                "UPDATE subscriptions SET deleted_ms = ?, enabled = 0 "
                "WHERE id = ? AND deleted_ms IS NULL",
                (now_ms, sub_id),
            ).rowcount
            raw.execute(
                "UPDATE subscription_events SET delivery = 'failed', next_attempt_ms = NULL "
                "WHERE subscription = ? AND delivery = 'queued'",
                (sub_id,),
            )
            self._hint(raw, CHANGED)
            return bool(done)

        return await self.vault.run(body)

    async def add_events(
        self, sub_id: str, events: Sequence[NewEvent], *, webhook: bool, now_ms: int
    ) -> list[int]:
        """Store the events of one trigger and mark the subscription triggered; their seqs."""

        def body(raw: sqlite3.Connection) -> list[int]:
            seqs = []
            for event in events:
                cur = raw.execute(
                    "INSERT INTO subscription_events "
                    "(id, subscription, chat, payload, delivery, next_attempt_ms, created_ms) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq",
                    (
                        event.id, sub_id, event.chat, json.dumps(event.payload),
                        "queued" if webhook else "stored", now_ms if webhook else None, now_ms,
                    ),
                )  # fmt: skip
                seqs.append(int(cur.fetchone()[0]))
            raw.execute(
                "UPDATE subscriptions SET last_triggered_ms = ? WHERE id = ?", (now_ms, sub_id)
            )
            self._hint(raw, sub_id)
            return seqs

        return await self.vault.run(body)

    async def events_since(self, sub_id: str, after_seq: int, limit: int) -> list[EventRow]:
        rows = await self.vault.fetchall(
            "SELECT seq, id, subscription, chat, payload, status, delivery, attempts "
            "FROM subscription_events WHERE subscription = ? AND seq > ? ORDER BY seq LIMIT ?",
            (sub_id, after_seq, limit),
        )
        return [_event(r) for r in rows]

    async def last_seq(self, sub_id: str) -> int:
        found = await self.vault.scalar(
            "SELECT max(seq) FROM subscription_events WHERE subscription = ?", (sub_id,)
        )
        return 0 if found is None else int(found)

    async def event(self, event_id: str) -> EventRow | None:
        row = await self.vault.fetchone(
            "SELECT seq, id, subscription, chat, payload, status, delivery, attempts "
            "FROM subscription_events WHERE id = ?",
            (event_id,),
        )
        return None if row is None else _event(row)

    async def mark_shown(self, seqs: Sequence[int]) -> None:
        if seqs:
            await self.vault.write(
                "UPDATE subscription_events SET status = 'shown' WHERE status = 'pending' "
                "AND seq IN (SELECT value FROM json_each(?))",
                (json.dumps(list(seqs)),),
            )

    async def set_status(self, event_id: str, status: str) -> bool:
        """pending|shown -> used|dismissed; False when it already had its feedback."""
        done = await self.vault.write_rowcount(
            "UPDATE subscription_events SET status = ? WHERE id = ? "
            "AND status IN ('pending', 'shown')",
            (status, event_id),
        )
        return bool(done)

    # --- webhook delivery ---------------------------------------------------------------------

    # Which due events are whose, and when the next one is: `vault/webhook_claims.py`. The
    # attempt's outcome is written only while `holder` (its replica; None: one process) still
    # holds the event, and clears the hold.
    _HELD = "seq = ? AND owner IS ?"

    async def delivered(self, seq: int, sub_id: str, *, holder: str | None = None) -> bool:
        """A 2xx; False (nothing written) if another replica took the event over."""

        def body(raw: sqlite3.Connection) -> bool:
            done = raw.execute(
                "UPDATE subscription_events SET delivery = 'delivered', attempts = attempts + 1, "
                "next_attempt_ms = NULL, status = CASE status WHEN 'pending' THEN 'shown' "
                f"ELSE status END, owner = NULL, lease_until = NULL WHERE {self._HELD}",
                (seq, holder),
            ).rowcount
            if done:
                raw.execute("UPDATE subscriptions SET failures = 0 WHERE id = ?", (sub_id,))
            return bool(done)

        return await self.vault.run(body)

    async def set_enabled(self, sub_id: str, enabled: bool, reason: str | None) -> bool:
        """Turn a live subscription on (its failure count starts again at 0) or off with a
        reason; False if there is no live subscription of that id."""

        def body(raw: sqlite3.Connection) -> bool:
            done = raw.execute(
                "UPDATE subscriptions SET enabled = ?, disabled_reason = ?, "
                "failures = CASE WHEN ? = 1 THEN 0 ELSE failures END "
                "WHERE id = ? AND deleted_ms IS NULL",
                (int(enabled), None if enabled else reason, int(enabled), sub_id),
            ).rowcount
            self._hint(raw, CHANGED)
            return bool(done)

        return await self.vault.run(body)

    async def failed(
        self,
        seq: int,
        sub_id: str,
        *,
        retry_at_ms: int | None,
        max_failures: int,
        reason: str,
        holder: str | None = None,
    ) -> bool:
        """One failed attempt: retry at `retry_at_ms` (None: give the event up). The
        subscription is disabled once it failed `max_failures` times in a row; True then.
        Nothing is written if another replica took the event over."""

        def body(raw: sqlite3.Connection) -> bool:
            if not raw.execute(
                "UPDATE subscription_events SET attempts = attempts + 1, next_attempt_ms = ?, "
                "delivery = CASE WHEN ? IS NULL THEN 'failed' ELSE 'queued' END, "
                f"owner = NULL, lease_until = NULL WHERE {self._HELD}",
                (retry_at_ms, retry_at_ms, seq, holder),
            ).rowcount:
                return False
            row = raw.execute(
                "UPDATE subscriptions SET failures = failures + 1 WHERE id = ? "
                "RETURNING failures, enabled",
                (sub_id,),
            ).fetchone()
            if row is None or not row[1] or row[0] < max_failures:
                return False
            raw.execute(
                "UPDATE subscriptions SET enabled = 0, disabled_reason = ? WHERE id = ?",
                (reason, sub_id),
            )
            self._hint(raw, CHANGED)
            return True

        return await self.vault.run(body)

    # --- what the privacy filter reads --------------------------------------------------------

    async def memory_owners(self, ids: Sequence[int]) -> dict[int, int]:
        """Memory id -> the user (pk) it belongs to."""
        rows = await self.vault.fetchall(
            "SELECT id, user FROM memories WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),),
        )
        return {int(r["id"]): int(r["user"]) for r in rows}

    async def followup_owners(self, ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Follow-up (intent) id -> (user pk, chat pk) it belongs to."""
        rows = await self.vault.fetchall(
            "SELECT id, user, chat FROM proactive_intents "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),),
        )
        return {int(r["id"]): (int(r["user"]), int(r["chat"])) for r in rows}

    async def user_key(self, user_pk: int) -> str | None:
        row = await self.vault.fetchone(
            "SELECT channel, user_id FROM users WHERE id = ?", (user_pk,)
        )
        return None if row is None else f"{row['channel']}:{row['user_id']}"

    async def document_scopes(self, ids: Sequence[int]) -> dict[int, str | None]:
        """Live document id -> its scope glob (None: visible in every allowed chat)."""
        rows = await self.vault.fetchall(
            "SELECT id, scope FROM knowledge_documents WHERE retired_ms IS NULL "
            "AND id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),),
        )
        return {int(r["id"]): r["scope"] for r in rows}

    async def documents_by_path(self, paths: Sequence[str]) -> list[tuple[int, str, str, str]]:
        """(id, path, title, type) of the live documents at these paths."""
        rows = await self.vault.fetchall(
            "SELECT id, path, title, type FROM knowledge_documents WHERE retired_ms IS NULL "
            "AND path IN (SELECT value FROM json_each(?)) ORDER BY path",
            (json.dumps(list(paths)),),
        )
        return [(int(r["id"]), r["path"], r["title"], r["type"]) for r in rows]

    async def chat_kinds(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """(channel, chat_id) -> 'dm' | 'group' for the chats Iris knows (any thread)."""
        rows = await self.vault.fetchall(
            "SELECT channel, chat_id, max(kind) AS kind FROM chats "
            "WHERE channel || ':' || chat_id IN (SELECT value FROM json_each(?)) "
            "GROUP BY channel, chat_id",
            (json.dumps([f"{c}:{i}" for c, i in keys]),),
        )
        return {(r["channel"], r["chat_id"]): r["kind"] for r in rows}
