"""The engine's hot write transactions as synchronous bodies for `Vault.run`.

Each function here runs on the writer's worker thread inside one `BEGIN IMMEDIATE … COMMIT`
(one thread hop for the whole transaction instead of one per statement). The semantics are
those documented in `vault/proactive/store.py`: every change of a claimed row is guarded by
its claim token, and the outbox row, the log row and `delivering` are written together before
the send.
`complete_in` is also what the delivery runs in the transaction that marks the outbox row
`sent`, so a delivered message, its terminal state and its assistant turn commit together.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from gateway.core.messages import Outbound
from vault.conversations import insert_message, open_session
from vault.proactive.items import TABLES, Blocked, Item, ItemStatus, LostClaim, QuotaCheck
from vault.served import served_clause

COUNTED = "('delivering', 'sent', 'uncertain')"

# The chat's open session, created if there is none (the partial unique index makes it one).


def send_times_in(
    raw: sqlite3.Connection, users: Iterable[int], since_ms: int
) -> dict[int, list[int]]:
    """`sent_at` of each user's quota-counted messages since `since_ms`."""
    found: dict[int, list[int]] = {user: [] for user in users}
    unique = list(found)
    for at in range(0, len(unique), 500):
        chunk = unique[at : at + 500]
        rows = raw.execute(
            f"""SELECT user, sent_at FROM proactive_log
                WHERE user IN ({",".join("?" * len(chunk))}) AND sent_at >= ?
                  AND status IN {COUNTED}""",
            (*chunk, since_ms),
        ).fetchall()
        for row in rows:
            found[int(row[0])].append(int(row[1]))
    return found


def sends_since_in(raw: sqlite3.Connection, since_ms: int) -> int:
    """Everyone's quota-counted messages since `since_ms`."""
    return int(
        raw.execute(
            f"SELECT count(*) FROM proactive_log WHERE sent_at >= ? AND status IN {COUNTED}",
            (since_ms,),
        ).fetchone()[0]
    )


# What the claim's inner SELECT adds per backend. SQLite: nothing (`BEGIN IMMEDIATE` already
# makes one writer). PostgreSQL: lock the chosen rows, skipping those another replica's claim
# is locking. Without it two concurrent claims would pick the same rows from their snapshots,
# and the second UPDATE, once the first commits, would re-lease them (the subquery is not
# re-evaluated after waiting on the row lock).
SKIP_LOCKED = {"sqlite": "", "postgresql": " FOR UPDATE SKIP LOCKED"}


def claim_in(
    raw: sqlite3.Connection, *, now_ms: int, lease_ms: int, limit: int, token: str,
    dialect: str = "sqlite", served: Sequence[str] | None = None,
) -> dict[str, list[int]]:  # fmt: skip
    """Lease up to `limit` due rows (intents first, oldest due first) to `token`, of chats on
    the `served` channels."""
    ids: dict[str, list[int]] = {"intent": [], "trigger": []}
    only, channels = served_clause("chat", served, chat_id=True)
    for source in ("intent", "trigger"):
        left = limit - len(ids["intent"])
        if left <= 0:
            break
        rows = raw.execute(
            f"""UPDATE {TABLES[source]} SET claim = ?, lease_until = ?, attempts = attempts + 1
                WHERE id IN (SELECT id FROM {TABLES[source]}
                    WHERE status = 'pending' AND execute_at <= ?
                      AND (lease_until IS NULL OR lease_until <= ?){only}
                    ORDER BY execute_at LIMIT ?{SKIP_LOCKED[dialect]})
                RETURNING id""",
            (token, now_ms + lease_ms, now_ms, now_ms, *channels, left),
        ).fetchall()  # every RETURNING row is fetched before COMMIT
        ids[source] = [int(r[0]) for r in rows]
    return ids


def expire_stale_in(raw: sqlite3.Connection, *, now_ms: int, cutoff_ms: int) -> int:
    total = 0
    for table in TABLES.values():
        total += raw.execute(
            f"""UPDATE {table} SET status = 'expired', finished_at = ?, claim = NULL,
                   reason = 'expired: older than the maximum age', lease_until = NULL
                WHERE status = 'pending' AND execute_at <= ? AND due_at < ?
                  AND (lease_until IS NULL OR lease_until <= ?)""",
            (now_ms, now_ms, cutoff_ms, now_ms),
        ).rowcount
    return total


def finish_in(
    raw: sqlite3.Connection, item: Item, status: ItemStatus, reason: str, now_ms: int
) -> bool:
    changed = raw.execute(
        f"""UPDATE {TABLES[item.source]} SET status = ?, reason = ?, finished_at = ?,
               lease_until = NULL
            WHERE id = ? AND claim = ? AND status = 'pending'""",
        (status, reason, now_ms, item.id, item.claim),
    ).rowcount
    return bool(changed == 1)


def reschedule_in(
    raw: sqlite3.Connection, item: Item, at_ms: int, reason: str, deferral: bool
) -> bool:
    changed = raw.execute(
        f"""UPDATE {TABLES[item.source]} SET execute_at = ?, reason = ?, claim = NULL,
               lease_until = NULL, deferrals = deferrals + ?
            WHERE id = ? AND claim = ? AND status = 'pending'""",
        (at_ms, reason, int(deferral), item.id, item.claim),
    ).rowcount
    return bool(changed == 1)


class GlobalGauge:
    """Everyone's quota-counted sends since a UTC midnight, kept up to date incrementally.

    Counting the whole day's log rows in every delivery transaction costs time proportional to
    the day's sends. Instead the gauge keeps (count, highest log id seen) and adds only the rows
    written since — by this process or any other — inside the caller's transaction. A row can
    only *leave* the counted set (a `delivering` row that fails) and log ids only grow (rows are
    never deleted), so the kept count is an upper bound: below the limit it proves there is
    room; at or above it the count is redone exactly. Never more sends than the quota, and
    never a refusal the exact count would not give.
    """

    def __init__(self) -> None:
        self._since: int | None = None
        self._last_id = 0
        self._count = 0

    def full(self, raw: sqlite3.Connection, since_ms: int, limit: int) -> bool:
        if self._since == since_ms:
            top = int(raw.execute("SELECT coalesce(max(id), 0) FROM proactive_log").fetchone()[0])
            if top >= self._last_id:
                self._count += int(
                    raw.execute(
                        f"""SELECT count(*) FROM proactive_log WHERE id > ? AND id <= ?
                            AND sent_at >= ? AND status IN {COUNTED}""",
                        (self._last_id, top, since_ms),
                    ).fetchone()[0]
                )
                self._last_id = top
                if self._count < limit:
                    return False
        count, top = raw.execute(
            f"""SELECT count(*), (SELECT coalesce(max(id), 0) FROM proactive_log)
                FROM proactive_log WHERE sent_at >= ? AND status IN {COUNTED}""",
            (since_ms,),
        ).fetchone()
        self._since, self._count, self._last_id = since_ms, int(count), int(top)
        return self._count >= limit


def spacing_block_in(
    raw: sqlite3.Connection, user: int, now_ms: int, spacing_ms: int
) -> Blocked | None:
    """The user's latest counted message, if it went out less than `spacing_ms` ago (any chat;
    an index range scan of `proactive_log_user`)."""
    last = raw.execute(
        f"""SELECT max(sent_at) FROM proactive_log
            WHERE user = ? AND sent_at > ? AND status IN {COUNTED}""",
        (user, now_ms - spacing_ms),
    ).fetchone()[0]
    return None if last is None else Blocked("spacing", int(last))


def quota_full_in(
    raw: sqlite3.Connection, user: int, quota: QuotaCheck, gauge: GlobalGauge
) -> bool:
    """True if the user's or the global quota is used up."""
    mine = raw.execute(
        f"""SELECT count(*) FROM (SELECT 1 FROM proactive_log WHERE user = ? AND sent_at >= ?
               AND status IN {COUNTED} LIMIT ?)""",
        (user, quota.user_since_ms, quota.user_limit),
    ).fetchone()[0]  # stops at the limit: a count past it changes nothing
    if mine >= quota.user_limit:
        return True
    return gauge.full(raw, quota.global_since_ms, quota.global_limit)


def begin_delivery_in(
    raw: sqlite3.Connection,
    item: Item,
    out: Outbound,
    now_ms: int,
    quota: QuotaCheck | None,
    gauge: GlobalGauge,
) -> int | Blocked:
    """Outbox row + log row + `delivering`, or `Blocked` (no quota left, or the spacing is not
    over) with nothing written. Raises LostClaim (rollback)."""
    if quota is not None:
        if quota_full_in(raw, item.user_pk, quota, gauge):
            return Blocked("quota")
        if quota.spacing_ms > 0:
            blocked = spacing_block_in(raw, item.user_pk, now_ms, quota.spacing_ms)
            if blocked is not None:
                return blocked
    chat = out.chat
    row = raw.execute(
        """INSERT INTO outbox (idempotency_key, channel, chat_id, thread_id, kind, text, reply_to,
                               status, attempts, next_attempt_ms, created_ms)
           VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?)
           ON CONFLICT (idempotency_key) DO NOTHING RETURNING id""",
        (out.idempotency_key, chat.channel, chat.chat_id, chat.thread_id, out.kind.value,
         out.text, out.reply_to, now_ms, now_ms),
    ).fetchone()  # fmt: skip
    if row is None:  # the key exists: an earlier run got this far, so this claim is stale
        raise LostClaim
    outbox_id = int(row[0])
    changed = raw.execute(
        f"""UPDATE {TABLES[item.source]} SET status = 'delivering', outbox_id = ?, result = ?
            WHERE id = ? AND claim = ? AND status = 'pending'""",
        (outbox_id, out.text, item.id, item.claim),
    ).rowcount
    if changed != 1:
        raise LostClaim  # rolls the outbox row back with everything else
    raw.execute(
        """INSERT INTO proactive_log (user, chat, type, source_id, outbox_id, sent_at)
           VALUES (?, ?, ?, ?, ?, ?)""",
        (item.user_pk, item.chat_pk, item.source, item.id, outbox_id, now_ms),
    )
    return outbox_id


def complete_in(
    raw: sqlite3.Connection, item: Item, status: ItemStatus, reason: str, text: str, now_ms: int
) -> bool:
    """Terminal state of a `delivering` row; a (possibly) delivered text joins the chat."""
    changed = raw.execute(
        f"""UPDATE {TABLES[item.source]} SET status = ?, reason = ?, finished_at = ?,
               lease_until = NULL
            WHERE id = ? AND claim = ? AND status = 'delivering'""",
        (status, reason, now_ms, item.id, item.claim),
    ).rowcount
    if changed != 1:
        return False
    raw.execute(
        "UPDATE proactive_log SET status = ? WHERE type = ? AND source_id = ?",
        (status, item.source, item.id),
    )
    if status is not ItemStatus.FAILED:
        session = open_session(raw, item.chat_pk, now_ms)
        insert_message(
            raw, session=session["id"], chat=item.chat_pk, user=None, role="assistant",
            kind="proactive", text=text, tokens=len(text) // 4 + 1, now_ms=now_ms,
        )  # fmt: skip
    return True


def renew_in(raw: sqlite3.Connection, items: Iterable[Item], token: str, lease_until: int) -> int:
    """Extend the lease of the rows among `items` still held by `token` (pending or delivering,
    not yet finished, released or taken over); how many were renewed."""
    renewed = 0
    for source, table in TABLES.items():
        ids = sorted({i.id for i in items if i.source == source})
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            renewed += raw.execute(
                f"""UPDATE {table} SET lease_until = ?
                    WHERE id IN ({",".join("?" * len(chunk))}) AND claim = ?
                      AND status IN ('pending', 'delivering') AND lease_until IS NOT NULL""",
                (lease_until, *chunk, token),
            ).rowcount
    return renewed


def take_over_in(
    raw: sqlite3.Connection, item: Item, token: str, lease_until: int, now_ms: int
) -> bool:
    changed = raw.execute(
        f"""UPDATE {TABLES[item.source]} SET claim = ?, lease_until = ?
            WHERE id = ? AND claim IS ? AND status = 'delivering'
              AND (lease_until IS NULL OR lease_until <= ?)""",
        (token, lease_until, item.id, item.claim, now_ms),
    ).rowcount
    return bool(changed == 1)
