"""Proactive intents and triggers: registration, the leased claim, and every state change.

Both tables share one lifecycle (see the `proactive` migration). The claim is one
`UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING id` inside `BEGIN IMMEDIATE` (on PostgreSQL
the SELECT is `FOR UPDATE SKIP LOCKED`: replicas claiming at once skip each other's rows), so
two engines never hold the same row; it stamps a `claim` token and a lease, and every later
change of that row is guarded by the token — a run whose lease expired (a crash, a hang) and
was taken over can no longer write. `begin_delivery` writes the outbox row, the log row and
the `delivering` state in one transaction *before* the send, so a crash can never lead to a
second send.
The engine's hot transactions are synchronous bodies (`vault/proactive/tx.py`) run with
`Vault.run`: one worker-thread hop per transaction instead of one per statement.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.core.messages import Outbound
from vault.db import Vault
from vault.proactive.items import (
    ITEM_SELECT,
    TABLES,
    TARGET_COLUMNS,
    TERMINAL,
    TRIGGER_TYPES,
    Blocked,
    Delivering,
    Item,
    ItemStatus,
    LostClaim,
    QuotaCheck,
    Source,
    add_trigger_in,
    item_from_row,
)
from vault.proactive.tx import (
    GlobalGauge,
    begin_delivery_in,
    claim_in,
    complete_in,
    expire_stale_in,
    finish_in,
    renew_in,
    reschedule_in,
    send_times_in,
    sends_since_in,
    take_over_in,
)
from vault.served import served_clause

__all__ = [
    "TERMINAL",
    "TRIGGER_TYPES",
    "Blocked",
    "Delivering",
    "Item",
    "ItemStatus",
    "LostClaim",
    "ProactiveStore",
    "QuotaCheck",
    "Source",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Claimed:
    """What a tick starts from (`expire_and_claim`)."""

    expired: int
    items: list[Item]  # oldest due first
    sends: dict[int, list[int]]  # each claimed item's user: counted sends since the floor
    global_sends: int  # everyone's counted sends since the UTC day's start


class ProactiveStore:
    def __init__(self, vault: Vault, *, served: Sequence[str] | None = None) -> None:
        self.vault = vault
        # The channels this process delivers to: the engine claims, waits for and takes over
        # only their chats' items (None: every channel).
        self.served = None if served is None else tuple(sorted(served))
        self._gauge = GlobalGauge()  # used only inside write transactions (one at a time)

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
        values = (chat, user, what, why, confidence, kind, int(exact_time), execute_at,
                  execute_at, now_ms)  # fmt: skip

        def insert(raw: sqlite3.Connection) -> int:
            cursor = raw.execute(
                """INSERT INTO proactive_intents (chat, user, what, why, confidence, kind,
                       exact_time, execute_at, due_at, created_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                values,
            ).fetchone()
            return int(cursor[0])

        return await self.vault.run(insert)

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
        changed = await self.vault.write_rowcount(
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

    async def pending_triggers(self, user: int, limit: int = 20) -> list[Item]:
        """The user's check-ins found by the passive scan (or raised from outside), not yet run."""
        return await self._items(
            "trigger", "i.user = ? AND i.status = 'pending' ORDER BY i.execute_at LIMIT ?",
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
        return await self.vault.run(
            lambda raw: expire_stale_in(raw, now_ms=now_ms, cutoff_ms=cutoff_ms)
        )

    async def claim(self, *, now_ms: int, lease_ms: int, limit: int, token: str) -> list[Item]:
        """Lease up to `limit` due rows (intents first, oldest due first) to `token`."""
        dialect, served = self.vault.dialect, self.served
        ids = await self.vault.run(
            lambda raw: claim_in(
                raw, now_ms=now_ms, lease_ms=lease_ms, limit=limit, token=token, dialect=dialect,
                served=served,
            )
        )  # fmt: skip
        return await self._claimed(ids)

    async def expire_and_claim(
        self, *, now_ms: int, cutoff_ms: int, lease_ms: int, limit: int, token: str,
        sends_since_ms: int, global_since_ms: int,
    ) -> Claimed:  # fmt: skip
        """`expire_stale`, then `claim`, in one transaction that also reads back the claimed
        items and the quota-counted sends their users got since `sends_since_ms` and everyone
        got since `global_since_ms` — the start of a tick in one hop."""
        dialect, served = self.vault.dialect, self.served

        def body(raw: sqlite3.Connection) -> Claimed:
            expired = expire_stale_in(raw, now_ms=now_ms, cutoff_ms=cutoff_ms)
            ids = claim_in(
                raw, now_ms=now_ms, lease_ms=lease_ms, limit=limit, token=token, dialect=dialect,
                served=served,
            )  # fmt: skip
            items = [
                item_from_row(row)
                for source in ("intent", "trigger")
                for at in range(0, len(ids[source]), 500)
                for row in raw.execute(*_by_ids(source, ids[source][at : at + 500])).fetchall()
            ]
            return Claimed(
                expired=expired,
                items=sorted(items, key=lambda i: (i.execute_at, i.source, i.id)),
                sends=send_times_in(raw, (i.user_pk for i in items), sends_since_ms),
                global_sends=sends_since_in(raw, global_since_ms),
            )

        return await self.vault.run(body)

    async def _claimed(self, ids: dict[str, list[int]]) -> list[Item]:
        """The claimed rows as items (read together), oldest due first."""
        reads = []
        for source in ("intent", "trigger"):
            found = ids[source]
            for at in range(0, len(found), 500):
                sql, params = _by_ids(source, found[at : at + 500])
                reads.append(self.vault.fetchall(sql, params))
        items = [item_from_row(r) for rows in await asyncio.gather(*reads) for r in rows]
        return sorted(items, key=lambda i: (i.execute_at, i.source, i.id))

    async def next_due_ms(self) -> int | None:
        only, channels = served_clause("chat", self.served, chat_id=True)
        value = await self.vault.scalar(
            f"""SELECT min(t) FROM (
                 SELECT min(execute_at) AS t FROM proactive_intents
                 WHERE status = 'pending'{only}
                 UNION ALL
                 SELECT min(execute_at) FROM proactive_triggers
                 WHERE status = 'pending'{only})""",
            channels * 2,
        )
        return None if value is None else int(value)

    async def finish(self, item: Item, status: ItemStatus, reason: str, now_ms: int) -> bool:
        """A terminal state straight from the claim (expired, skipped, failed before a send)."""
        assert status in (
            ItemStatus.SKIPPED,
            ItemStatus.EXPIRED,
            ItemStatus.CANCELLED,
            ItemStatus.FAILED,
        )
        return await self.vault.run(lambda raw: finish_in(raw, item, status, reason, now_ms))

    async def reschedule(
        self, item: Item, at_ms: int, reason: str, *, deferral: bool = True
    ) -> bool:
        """Back to `pending` at `at_ms`, lease released (quiet hours, quota, model defer)."""
        return await self.vault.run(lambda raw: reschedule_in(raw, item, at_ms, reason, deferral))

    async def begin_delivery(
        self, item: Item, out: Outbound, now_ms: int, quota: QuotaCheck | None
    ) -> int | Blocked:
        """Outbox row + log row + `delivering`, atomically. `Blocked`: no quota left or the
        spacing is not over (nothing written); raises `LostClaim` (everything rolled back) if
        the row changed hands."""
        return await self.vault.run(
            lambda raw: begin_delivery_in(raw, item, out, now_ms, quota, self._gauge)
        )

    async def complete_delivery(
        self, item: Item, status: ItemStatus, reason: str, text: str, now_ms: int
    ) -> bool:
        """Terminal state of a `delivering` row; a (possibly) delivered text joins the chat."""
        assert status in (ItemStatus.SENT, ItemStatus.FAILED, ItemStatus.UNCERTAIN)
        return await self.vault.run(
            lambda raw: complete_in(raw, item, status, reason, text, now_ms)
        )

    async def delivering(self) -> list[Delivering]:
        found: list[Delivering] = []
        only, channels = served_clause("i.chat", self.served, chat_id=True)
        both = await asyncio.gather(  # one read hop for the two tables
            *(
                self.vault.fetchall(
                    f"""{ITEM_SELECT[source]}{TARGET_COLUMNS}, o.id AS outbox_id,
                            o.status AS outbox_status, i.lease_until, i.result AS text
                        FROM {TABLES[source]} i JOIN chats c ON c.id = i.chat
                        JOIN users u ON u.id = i.user JOIN outbox o ON o.id = i.outbox_id
                        WHERE i.status = 'delivering'{only}""",
                    channels,
                )
                for source in ("intent", "trigger")
            )
        )
        for rows in both:
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

    async def renew(self, items: list[Item], token: str, lease_until: int) -> int:
        """Extend the lease of the rows among `items` that `token` still holds (the engine
        renews what a tick holds while it runs, so a short lease never expires under a live
        run); rows finished, released or taken over are left alone."""
        held = list(items)
        if not held:
            return 0
        return await self.vault.run(lambda raw: renew_in(raw, held, token, lease_until))

    async def take_over(self, item: Item, token: str, lease_until: int, now_ms: int) -> Item | None:
        """Re-lease a `delivering` row whose lease expired; the new claim guards its finish."""
        if not await self.vault.run(
            lambda raw: take_over_in(raw, item, token, lease_until, now_ms)
        ):
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


def _by_ids(source: Source, ids: list[int]) -> tuple[str, tuple[int, ...]]:
    """The query reading these rows of one table as items, and its parameters."""
    marks = ",".join("?" * len(ids))
    return (
        f"""{ITEM_SELECT[source]}{TARGET_COLUMNS} FROM {TABLES[source]} i
            JOIN chats c ON c.id = i.chat JOIN users u ON u.id = i.user WHERE i.id IN ({marks})""",
        tuple(ids),
    )
