"""Proactive intents and triggers: registration, the leased claim, and every state change.

Both tables share one lifecycle (see the `proactive` migration). The claim is one
`UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING id` inside `BEGIN IMMEDIATE`, so two engines
never hold the same row; it stamps a `claim` token and a lease, and every later change of that
row is guarded by the token — a run whose lease expired (a crash, a hang) and was taken over
can no longer write. `begin_delivery` writes the outbox row, the log row and the `delivering`
state in one transaction *before* the send, so a crash can never lead to a second send.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.messages import Outbound
from vault.conversations import append_message
from vault.db import Vault
from vault.outbox import enqueue_in
from vault.proactive_items import (
    ITEM_SELECT,
    TABLES,
    TARGET_COLUMNS,
    TERMINAL,
    TRIGGER_TYPES,
    Delivering,
    Item,
    LostClaim,
    QuotaCheck,
    Source,
    add_trigger_in,
    item_from_row,
    quota_used,
    sends_since,
)

# The chat's open session, created if there is none (the partial unique index makes it one).
_OPEN_SESSION = """INSERT INTO sessions (chat, started_ms) VALUES (?, ?)
    ON CONFLICT (chat) WHERE ended_ms IS NULL DO UPDATE SET chat = excluded.chat RETURNING id"""

__all__ = [
    "TERMINAL",
    "TRIGGER_TYPES",
    "Delivering",
    "Item",
    "LostClaim",
    "ProactiveStore",
    "QuotaCheck",
    "Source",
    "quota_used",
    "sends_since",
]


class ProactiveStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    # -- registration -------------------------------------------------------------------
    async def add_intent(
        self,
        *,
        chat: int,
        user: int,
        what: str,
        why: str,
        confidence: float,
        kind: str,
        exact_time: bool,
        execute_at: int,
        now_ms: int,
    ) -> int:
        async with self.vault.transaction() as tx:
            return await tx.execute(
                """INSERT INTO proactive_intents (chat, user, what, why, confidence, kind,
                       exact_time, execute_at, due_at, created_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (chat, user, what, why, confidence, kind, int(exact_time), execute_at,
                 execute_at, now_ms),
            )  # fmt: skip

    async def add_trigger(
        self,
        *,
        type: str,
        chat: int,
        user: int,
        context: str,
        source_key: str,
        execute_at: int,
        now_ms: int,
    ) -> int | None:
        """Insert unless this situation was already detected or one of the type is open."""
        async with self.vault.transaction() as tx:
            return await add_trigger_in(
                tx, (type, chat, user, context, source_key, execute_at, execute_at, now_ms)
            )

    async def has_pending_trigger(self, user: int, type: str) -> bool:
        found = await self.vault.scalar(
            """SELECT 1 FROM proactive_triggers WHERE user = ? AND type = ?
               AND status IN ('pending', 'delivering')""",
            (user, type),
        )
        return found is not None

    async def cancel_intent(self, user: int, intent_id: int, now_ms: int) -> bool:
        """Cancel one of `user`'s pending intents (never another user's; never one in flight)."""
        async with self.vault.transaction() as tx:
            changed = await tx.execute_rowcount(
                """UPDATE proactive_intents SET status = 'cancelled', finished_at = ?,
                       reason = 'cancelled by request', claim = NULL, lease_until = NULL
                   WHERE id = ? AND user = ? AND status = 'pending'""",
                (now_ms, intent_id, user),
            )
        return changed == 1

    async def pending_intents(self, user: int, limit: int = 20) -> list[Item]:
        return await self._items(
            "intent", "i.user = ? AND i.status = 'pending' ORDER BY i.execute_at LIMIT ?",
            (user, limit),
        )  # fmt: skip

    async def get(self, source: Source, item_id: int) -> Item | None:
        found = await self._items(source, "i.id = ?", (item_id,))
        return found[0] if found else None

    async def fire_now(self, intent_id: int, now_ms: int) -> bool:
        async with self.vault.transaction() as tx:
            changed = await tx.execute_rowcount(
                """UPDATE proactive_intents SET execute_at = ?
                   WHERE id = ? AND status = 'pending'""",
                (now_ms, intent_id),
            )
        return changed == 1

    async def _items(self, source: Source, where: str, params: tuple[Any, ...]) -> list[Item]:
        rows = await self.vault.fetchall(
            f"""{ITEM_SELECT[source]}{TARGET_COLUMNS} FROM {TABLES[source]} i
                JOIN chats c ON c.id = i.chat JOIN users u ON u.id = i.user WHERE {where}""",
            params,
        )
        return [item_from_row(r) for r in rows]

    # -- the engine's side ----------------------------------------------------------------
    async def expire_stale(self, *, now_ms: int, cutoff_ms: int) -> int:
        """Expire due, unleased rows first due before `cutoff_ms` (missed while down)."""
        total = 0
        async with self.vault.transaction() as tx:
            for table in TABLES.values():
                total += await tx.execute_rowcount(
                    f"""UPDATE {table} SET status = 'expired', finished_at = ?, claim = NULL,
                           reason = 'expired: older than the maximum age', lease_until = NULL
                        WHERE status = 'pending' AND execute_at <= ? AND due_at < ?
                          AND (lease_until IS NULL OR lease_until <= ?)""",
                    (now_ms, now_ms, cutoff_ms, now_ms),
                )
        return total

    async def claim(self, *, now_ms: int, lease_ms: int, limit: int, token: str) -> list[Item]:
        """Lease up to `limit` due rows (intents first, oldest due first) to `token`."""
        ids: dict[Source, list[int]] = {"intent": [], "trigger": []}
        async with self.vault.transaction() as tx:
            for source in ("intent", "trigger"):
                left = limit - len(ids["intent"])
                if left <= 0:
                    break
                rows = await tx.fetchall(
                    f"""UPDATE {TABLES[source]} SET claim = ?, lease_until = ?,
                           attempts = attempts + 1
                        WHERE id IN (SELECT id FROM {TABLES[source]}
                            WHERE status = 'pending' AND execute_at <= ?
                              AND (lease_until IS NULL OR lease_until <= ?)
                            ORDER BY execute_at LIMIT ?)
                        RETURNING id""",
                    (token, now_ms + lease_ms, now_ms, now_ms, left),
                )
                ids[source] = [int(r[0]) for r in rows]
        items: list[Item] = []
        for source, found in ids.items():
            if found:
                marks = ",".join("?" * len(found))
                items += await self._items(source, f"i.id IN ({marks})", tuple(found))
        return sorted(items, key=lambda i: (i.execute_at, i.source, i.id))

    async def next_due_ms(self) -> int | None:
        value = await self.vault.scalar(
            """SELECT min(t) FROM (
                 SELECT min(execute_at) AS t FROM proactive_intents WHERE status = 'pending'
                 UNION ALL
                 SELECT min(execute_at) FROM proactive_triggers WHERE status = 'pending')"""
        )
        return None if value is None else int(value)

    async def finish(self, item: Item, status: str, reason: str, now_ms: int) -> bool:
        """A terminal state straight from the claim (expired, skipped, failed before a send)."""
        assert status in ("skipped", "expired", "cancelled", "failed")
        async with self.vault.transaction() as tx:
            changed = await tx.execute_rowcount(
                f"""UPDATE {TABLES[item.source]} SET status = ?, reason = ?, finished_at = ?,
                       lease_until = NULL
                    WHERE id = ? AND claim = ? AND status = 'pending'""",
                (status, reason, now_ms, item.id, item.claim),
            )
        return changed == 1

    async def reschedule(
        self, item: Item, at_ms: int, reason: str, *, deferral: bool = True
    ) -> bool:
        """Back to `pending` at `at_ms`, lease released (quiet hours, quota, model defer)."""
        async with self.vault.transaction() as tx:
            changed = await tx.execute_rowcount(
                f"""UPDATE {TABLES[item.source]} SET execute_at = ?, reason = ?, claim = NULL,
                       lease_until = NULL, deferrals = deferrals + ?
                    WHERE id = ? AND claim = ? AND status = 'pending'""",
                (at_ms, reason, int(deferral), item.id, item.claim),
            )
        return changed == 1

    async def begin_delivery(
        self, item: Item, out: Outbound, now_ms: int, quota: QuotaCheck | None
    ) -> int | None:
        """Outbox row + log row + `delivering`, atomically. None: lost the claim or no quota."""
        table = TABLES[item.source]
        async with self.vault.transaction() as tx:
            if quota is not None:
                mine, everyone = await quota_used(
                    tx, user=item.user_pk, user_since_ms=quota.user_since_ms,
                    global_since_ms=quota.global_since_ms,
                )  # fmt: skip
                if mine >= quota.user_limit or everyone >= quota.global_limit:
                    return None
            row = await enqueue_in(tx, out, now_ms, status="pending")
            changed = await tx.execute_rowcount(
                f"""UPDATE {table} SET status = 'delivering', outbox_id = ?, result = ?
                    WHERE id = ? AND claim = ? AND status = 'pending'""",
                (row.id, out.text, item.id, item.claim),
            )
            if changed != 1 or not row.created:
                raise LostClaim  # rolls the outbox row back with everything else
            await tx.execute(
                """INSERT INTO proactive_log (user, chat, type, source_id, outbox_id, sent_at)
                   VALUES (?, ?, ?, ?, ?, ?)""",
                (item.user_pk, item.chat_pk, item.source, item.id, row.id, now_ms),
            )
            return row.id

    async def complete_delivery(
        self, item: Item, status: str, reason: str, text: str, now_ms: int
    ) -> bool:
        """Terminal state of a `delivering` row; a (possibly) delivered text joins the chat."""
        assert status in ("sent", "failed", "uncertain")
        async with self.vault.transaction() as tx:
            changed = await tx.execute_rowcount(
                f"""UPDATE {TABLES[item.source]} SET status = ?, reason = ?, finished_at = ?,
                       lease_until = NULL
                    WHERE id = ? AND claim = ? AND status = 'delivering'""",
                (status, reason, now_ms, item.id, item.claim),
            )
            if changed != 1:
                return False
            await tx.execute(
                "UPDATE proactive_log SET status = ? WHERE type = ? AND source_id = ?",
                (status, item.source, item.id),
            )
            if status != "failed":
                session = await tx.fetchone(_OPEN_SESSION, (item.chat_pk, now_ms))
                assert session is not None
                await append_message(
                    tx, session=session[0], chat=item.chat_pk, user=None, role="assistant",
                    kind="proactive", text=text, tokens=len(text) // 4 + 1, now_ms=now_ms,
                )  # fmt: skip
        return True

    async def delivering(self) -> list[Delivering]:
        found: list[Delivering] = []
        for source in ("intent", "trigger"):
            rows = await self.vault.fetchall(
                f"""{ITEM_SELECT[source]}{TARGET_COLUMNS}, o.id AS outbox_id,
                        o.status AS outbox_status, i.lease_until, i.result AS text
                    FROM {TABLES[source]} i JOIN chats c ON c.id = i.chat
                    JOIN users u ON u.id = i.user JOIN outbox o ON o.id = i.outbox_id
                    WHERE i.status = 'delivering'"""
            )
            found += [
                Delivering(
                    item=item_from_row(r),
                    outbox_id=r["outbox_id"],
                    outbox_status=r["outbox_status"],
                    lease_until=r["lease_until"] or 0,
                    text=r["text"] or "",
                )
                for r in rows
            ]
        return found

    async def take_over(self, item: Item, token: str, lease_until: int, now_ms: int) -> Item | None:
        """Re-lease a `delivering` row whose lease expired; the new claim guards its finish."""
        async with self.vault.transaction() as tx:
            changed = await tx.execute_rowcount(
                f"""UPDATE {TABLES[item.source]} SET claim = ?, lease_until = ?
                    WHERE id = ? AND claim IS ? AND status = 'delivering'
                      AND (lease_until IS NULL OR lease_until <= ?)""",
                (token, lease_until, item.id, item.claim, now_ms),
            )
        if changed != 1:
            return None
        return replace(item, claim=token)

    async def interrupted_send(self, outbox_id: int, now_ms: int) -> None:
        """A `sending` outbox row whose run died: it may have gone out, so it is uncertain."""
        async with self.vault.transaction() as tx:
            await tx.execute(
                """UPDATE outbox SET status = 'uncertain',
                       last_error = 'engine stopped during the send'
                   WHERE id = ? AND status = 'sending'""",
                (outbox_id,),
            )

    async def recent_texts(self, chat: int, limit: int = 6) -> list[tuple[str, str]]:
        """(role, text) of the chat's last messages, oldest first, for the gate's prompt."""
        rows = await self.vault.fetchall(
            """SELECT role, text FROM messages WHERE chat = ? AND kind IN ('chat', 'proactive')
               ORDER BY id DESC LIMIT ?""",
            (chat, limit),
        )
        return [(str(r[0]), str(r[1])) for r in reversed(rows)]

    async def counts(self, source: Source) -> dict[str, int]:
        rows = await self.vault.fetchall(
            f"SELECT status, count(*) FROM {TABLES[source]} GROUP BY status"
        )
        return {str(r[0]): int(r[1]) for r in rows}
