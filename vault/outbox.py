"""The outbox: every outgoing message is a row before it is a network call.

States: `pending` (written, not yet attempted) -> `sending` (an attempt is under way) -> `sent`,
or back to `pending` after a transient failure, or `failed` (definite), or `uncertain` (the send
may or may not have reached the platform — a timeout after the request left, or a crash while a
row was `sending`). Uncertain rows are never resent automatically: a duplicate is worse than a
visible gap. The unique idempotency key makes a second enqueue of the same message a no-op.

Several replicas on one PostgreSQL vault: an `Outbox` given an `owner` (the replica's id)
stamps the rows it writes or starts sending with that owner and a lease, which
`Delivery` renews while the replica runs (`renew`). Another replica leaves a held row alone:
its startup recovery does not settle it, its resend does not send it, until the lease has
expired (the holder died); then the row is settled `uncertain` if it was being sent, or sent
in order if it was waiting. Without an owner (SQLite: one process) the columns stay NULL and
every row is this process's.

Size: a little over 400 lines: every state change of a row, its leases and its recovery after
a crash are one state machine, read together.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.messages import Button, ChatRef, Outbound, OutboundKind
from vault.batch import SyncBody
from vault.conversations import insert_message
from vault.db import Row, Vault
from vault.served import served_clause

TERMINAL = ("sent", "failed", "uncertain")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxRow:
    id: int
    outbound: Outbound
    status: str
    attempts: int
    # False when the idempotency key already existed and this is the earlier row.
    created: bool = True


@dataclass(frozen=True, slots=True)
class Lease:
    """A replica's hold on an outbox row: its id and when the hold ends unless renewed."""

    owner: str
    until_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """Where a reply's text joins the history once it was, or may have been, delivered."""

    session: int
    chat: int
    kind: str
    tokens: int


def record_history_in(raw: sqlite3.Connection, row_id: int, now_ms: int) -> bool:
    """Append the row's text to the history it was written for, once: the row forgets its
    session as it does, so whichever path gets there first records it (`sent`, `uncertain`, or
    queued for later; a row that fails without having been queued never is)."""
    found = raw.execute(
        """SELECT history_session, history_chat, history_kind, history_tokens, text FROM outbox
           WHERE id = ? AND history_session IS NOT NULL""",
        (row_id,),
    ).fetchone()
    if found is None:
        return False
    taken = raw.execute(
        "UPDATE outbox SET history_session = NULL WHERE id = ? AND history_session IS NOT NULL",
        (row_id,),
    ).rowcount
    if taken != 1:  # another settler's transaction got there between the read and now
        return False
    insert_message(
        raw, session=int(found[0]), chat=int(found[1]), user=None, role="assistant",
        kind=str(found[2]), text=str(found[4]), tokens=int(found[3] or 0), now_ms=now_ms,
    )  # fmt: skip
    return True


_COLUMNS = (
    "id, idempotency_key, channel, chat_id, thread_id, kind, text, reply_to, status, attempts, "
    "buttons, platform_ids"
)


def _buttons_json(rows: tuple[tuple[Button, ...], ...]) -> str | None:
    return json.dumps([[[b.label, b.payload] for b in r] for r in rows]) if rows else None


def _buttons(text: str | None) -> tuple[tuple[Button, ...], ...]:
    if not text:
        return ()
    return tuple(
        tuple(Button(label=str(b[0]), payload=str(b[1])) for b in r) for r in json.loads(text)
    )


def _ids(text: str | None) -> tuple[str, ...]:
    return tuple(str(i) for i in json.loads(text)) if text else ()


def _row(row: Row, *, created: bool = True) -> OutboxRow:
    thread = row["thread_id"]
    return OutboxRow(
        id=row["id"],
        outbound=Outbound(
            chat=ChatRef(channel=row["channel"], chat_id=row["chat_id"], thread_id=thread or None),
            text=row["text"],
            idempotency_key=row["idempotency_key"],
            reply_to=row["reply_to"] or None,
            kind=OutboundKind(row["kind"]),
            buttons=_buttons(row["buttons"]),
            # A row not yet sent keeps the chunks an earlier attempt delivered (`mark_retry`).
            sent_chunks=_ids(row["platform_ids"]) if row["status"] == "pending" else (),
        ),
        status=row["status"],
        attempts=row["attempts"],
        created=created,
    )


def enqueue_in(
    raw: sqlite3.Connection,
    out: Outbound,
    now_ms: int,
    *,
    status: str = "pending",
    history: History | None = None,
    lease: Lease | None = None,
) -> OutboxRow:
    """Insert the row inside the caller's transaction, or return the existing one for its key.
    With `history`, the text joins that session when the row is sent or turns uncertain; with
    `lease`, the row is held by that replica."""
    attempts = 1 if status == "sending" else 0
    h = history
    row = raw.execute(
        """INSERT INTO outbox (idempotency_key, channel, chat_id, thread_id, kind, text, reply_to,
                                status, attempts, next_attempt_ms, created_ms,
                                history_session, history_chat, history_kind, history_tokens,
                                owner, lease_until, buttons)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (idempotency_key) DO NOTHING
            RETURNING id""",
        (
            out.idempotency_key,
            out.chat.channel,
            out.chat.chat_id,
            out.chat.thread_id,
            out.kind.value,
            out.text,
            out.reply_to,
            status,
            attempts,
            now_ms,
            now_ms,
            None if h is None else h.session,
            None if h is None else h.chat,
            None if h is None else h.kind,
            None if h is None else h.tokens,
            None if lease is None else lease.owner,
            None if lease is None else lease.until_ms,
            _buttons_json(out.buttons),
        ),
    ).fetchone()
    if row is None:
        row = raw.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE idempotency_key = ?", (out.idempotency_key,)
        ).fetchone()
        assert row is not None
        return _row(row, created=False)
    return OutboxRow(id=row[0], outbound=out, status=status, attempts=attempts)


# A row still to be sent, or being sent: a later message to the same chat waits behind it.
_OPEN = "status IN ('pending', 'sending')"
_SAME_CHAT = "channel = ? AND chat_id = ? AND thread_id IS ?"


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingRow:
    """A pending row with no earlier open row in its chat: the next one to send there."""

    row: OutboxRow
    next_attempt_ms: int
    created_ms: int
    # Delivery has handled the row already (attempted it, or queued it behind another); an
    # untouched row was written `pending` by a component that is about to send it itself.
    touched: bool


BEHIND = "waiting behind an earlier message to this chat"


def enqueue_in_order_in(
    raw: sqlite3.Connection,
    out: Outbound,
    now_ms: int,
    history: History | None = None,
    lease: Lease | None = None,
) -> tuple[OutboxRow, bool]:
    """The row, ready to send (`sending`, attempt 1) — or `pending` behind an earlier open row
    of the same chat, and True, so that it goes out after that one."""
    chat = out.chat
    behind = raw.execute(
        f"SELECT 1 FROM outbox WHERE {_OPEN} AND {_SAME_CHAT} LIMIT 1",
        (chat.channel, chat.chat_id, chat.thread_id),
    ).fetchone()
    status = "pending" if behind else "sending"
    row = enqueue_in(raw, out, now_ms, status=status, history=history, lease=lease)
    if behind is not None and row.created:
        raw.execute("UPDATE outbox SET last_error = ? WHERE id = ?", (BEHIND, row.id))
    return row, behind is not None


# A row this replica may act on: not held by another live replica.
_FREE = "(o.owner IS NULL OR o.owner = ? OR o.lease_until <= ?)"


class Outbox:
    def __init__(self, vault: Vault, *, owner: str | None = None, lease_ms: int = 30_000) -> None:
        """`owner`: this replica's id when replicas share the vault (rows are leased to it for
        `lease_ms`, renewed by `renew`); None: this process is the only one (SQLite)."""
        self.vault = vault
        self.owner = owner
        self.lease_ms = lease_ms

    def lease(self, now_ms: int) -> Lease | None:
        return None if self.owner is None else Lease(self.owner, now_ms + self.lease_ms)

    async def enqueue_in_order(
        self, out: Outbound, now_ms: int, history: History | None = None
    ) -> tuple[OutboxRow, bool]:
        """`enqueue_in_order_in` in one write: (the row, whether it waits behind another)."""
        lease = self.lease(now_ms)
        return await self.vault.run(
            lambda raw: enqueue_in_order_in(raw, out, now_ms, history, lease)
        )

    async def first_waiting(
        self, limit: int = 500, now_ms: int = 0, channels: Sequence[str] | None = None
    ) -> list[WaitingRow]:
        """Pending rows that are first in their chat (counting every replica's), soonest due
        first; with an owner, only those no other live replica holds; with `channels`, only
        theirs (a process sends only on the channels it runs)."""
        free, params = "", (limit,)  # type: tuple[str, tuple[object, ...]]
        if self.owner is not None:
            free, params = f"AND {_FREE}", (self.owner, now_ms, limit)
        only, names = served_clause("o.channel", channels)
        free, params = free + only, (*params[:-1], *names, limit)
        rows = await self.vault.fetchall(
            f"""SELECT {_COLUMNS}, next_attempt_ms, created_ms,
                       attempts > 0 OR last_error IS NOT NULL AS touched
                FROM outbox AS o
                WHERE status = 'pending' {free} AND NOT EXISTS (
                    SELECT 1 FROM outbox AS p WHERE p.status IN ('pending', 'sending')
                       AND p.channel = o.channel AND p.chat_id = o.chat_id
                       AND p.thread_id IS o.thread_id AND p.id < o.id)
                ORDER BY next_attempt_ms, id LIMIT ?""",
            params,
        )
        return [
            WaitingRow(
                row=_row(r),
                next_attempt_ms=r["next_attempt_ms"],
                created_ms=r["created_ms"],
                touched=bool(r["touched"]),
            )
            for r in rows
        ]

    async def last_id(self) -> int:
        """The newest row's id (0 when empty): rows up to it were written before now."""
        return int(await self.vault.scalar("SELECT coalesce(max(id), 0) FROM outbox"))

    async def enqueue(self, out: Outbound, now_ms: int, *, status: str = "pending") -> OutboxRow:
        lease = self.lease(now_ms)
        return await self.vault.run(
            lambda raw: enqueue_in(raw, out, now_ms, status=status, lease=lease)
        )

    async def mark_sending(self, row_id: int, now_ms: int = 0) -> bool:
        """Claim a pending row for one attempt; False if it is no longer pending (or another
        live replica holds it)."""
        if self.owner is None:
            changed = await self.vault.write_rowcount(
                """UPDATE outbox SET status = 'sending', attempts = attempts + 1
                   WHERE id = ? AND status = 'pending'""",
                (row_id,),
            )
        else:
            changed = await self.vault.write_rowcount(
                f"""UPDATE outbox AS o SET status = 'sending', attempts = attempts + 1,
                       owner = ?, lease_until = ?
                    WHERE id = ? AND status = 'pending' AND {_FREE}""",
                (self.owner, now_ms + self.lease_ms, row_id, self.owner, now_ms),
            )
        return changed == 1

    async def renew(self, now_ms: int) -> int:
        """Extend this replica's hold on its open rows; how many. (No owner: nothing to do.)"""
        if self.owner is None:
            return 0
        return await self.vault.write_rowcount(
            """UPDATE outbox SET lease_until = ?
               WHERE owner = ? AND status IN ('pending', 'sending')""",
            (now_ms + self.lease_ms, self.owner),
        )

    async def mark_sent(
        self,
        row_id: int,
        platform_ids: Sequence[str],
        now_ms: int,
        *,
        also: SyncBody[None] | None = None,
    ) -> None:
        """Mark delivered, the text joining its history (`History`) in the same transaction;
        `also` runs in it too (a proactive item's terminal state)."""
        ids = json.dumps(list(platform_ids))

        def sent(raw: sqlite3.Connection) -> None:
            raw.execute(
                "UPDATE outbox SET status = 'sent', sent_ms = ?, platform_ids = ? WHERE id = ?",
                (now_ms, ids, row_id),
            )
            record_history_in(raw, row_id, now_ms)
            if also is not None:
                also(raw)

        await self.vault.run(sent)

    async def join_history(self, row_id: int, now_ms: int) -> None:
        """The row's text joins its history now, before it is sent (once: see
        `record_history_in`)."""
        await self.vault.run(lambda raw: record_history_in(raw, row_id, now_ms))

    async def mark_retry(
        self, row_id: int, error: str, next_attempt_ms: int, sent: Sequence[str] = ()
    ) -> None:
        """Back to `pending` until `next_attempt_ms`; `sent`: the platform ids of the chunks
        that went out already (a retry, here or after a restart, sends the rest)."""
        if sent:
            ids = json.dumps(list(sent))
            await self._set(
                row_id, "pending", error, next_attempt_ms=next_attempt_ms, platform_ids=ids
            )
        else:
            await self._set(row_id, "pending", error, next_attempt_ms=next_attempt_ms)

    async def mark_failed(self, row_id: int, error: str) -> None:
        await self._set(row_id, "failed", error)

    async def mark_uncertain(self, row_id: int, error: str, now_ms: int) -> None:
        """It may have arrived: `uncertain`, and its text joins its history (the user may
        have seen it)."""

        def uncertain(raw: sqlite3.Connection) -> None:
            raw.execute(
                "UPDATE outbox SET status = 'uncertain', last_error = ? WHERE id = ?",
                (error, row_id),
            )
            record_history_in(raw, row_id, now_ms)

        await self.vault.run(uncertain)

    def mark_uncertain_soon(self, row_id: int, error: str, now_ms: int) -> None:
        """Write-behind, for an attempt cut off mid-send (cancelled): the row, if still
        `sending`, may have gone out. Settled, it no longer holds up its chat, and its text
        joins its history like any uncertain send."""

        def settle(raw: sqlite3.Connection) -> None:
            changed = raw.execute(
                """UPDATE outbox SET status = 'uncertain', last_error = ?
                   WHERE id = ? AND status = 'sending'""",
                (error, row_id),
            ).rowcount
            if changed:
                record_history_in(raw, row_id, now_ms)

        self.vault.run_soon(settle, f"settle cancelled send #{row_id}")

    async def _set(self, row_id: int, status: str, error: str | None, **extra: object) -> None:
        sets = ", ".join(f"{k} = ?" for k in extra)
        sql = "UPDATE outbox SET status = ?, last_error = coalesce(?, last_error)"
        sql += f", {sets}" if sets else ""
        await self.vault.write(sql + " WHERE id = ?", (status, error, *extra.values(), row_id))

    async def recover_after_crash(
        self, now_ms: int, *, at_start: bool = True, channels: Sequence[str] | None = None
    ) -> int:
        """Rows left `sending` by a crash may have been delivered: mark them uncertain, their
        texts joining their histories (as a live uncertain send's does). With an owner, only
        rows no live replica holds: unowned, expired, or (`at_start`) this replica's own,
        left by its previous run under the same id."""
        where, params = "status = 'sending'", ()  # type: tuple[str, tuple[object, ...]]
        if self.owner is not None:
            mine = "o.owner = ? OR" if at_start else "o.owner != ? AND"
            where += f" AND (o.owner IS NULL OR {mine} o.lease_until <= ?)"
            params = (self.owner, now_ms)
        only, names = served_clause("o.channel", channels)  # another process may be
        where, params = where + only, (*params, *names)  # sending on the others right now

        def recover(raw: sqlite3.Connection) -> int:
            ids = [
                int(r[0])
                for r in raw.execute(
                    f"""UPDATE outbox AS o SET status = 'uncertain',
                              last_error = 'process stopped during the send'
                       WHERE {where} RETURNING id""",
                    params,
                ).fetchall()
            ]
            for row_id in sorted(ids):
                record_history_in(raw, row_id, now_ms)
            return len(ids)

        return await self.vault.run(recover)

    async def due(self, now_ms: int, limit: int = 100) -> list[OutboxRow]:
        rows = await self.vault.fetchall(
            f"""SELECT {_COLUMNS} FROM outbox WHERE status = 'pending' AND next_attempt_ms <= ?
                ORDER BY next_attempt_ms, id LIMIT ?""",
            (now_ms, limit),
        )
        return [_row(r) for r in rows]

    async def status(self, row_id: int) -> str | None:
        value = await self.vault.scalar("SELECT status FROM outbox WHERE id = ?", (row_id,))
        return None if value is None else str(value)

    async def created_ms(self, row_id: int) -> int | None:
        value = await self.vault.scalar("SELECT created_ms FROM outbox WHERE id = ?", (row_id,))
        return None if value is None else int(value)

    async def has_key_prefix(self, prefix: str) -> bool:
        """Whether any row's idempotency key starts with `prefix`: a turn's replies share
        one (`gateway/turns/replies.py`), so this says whether a message was answered."""
        found = await self.vault.scalar(
            """SELECT 1 FROM outbox WHERE idempotency_key >= ? AND idempotency_key < ?
               LIMIT 1""",
            (prefix, prefix + "\U0010ffff"),
        )
        return found is not None

    async def waiting_by_channel(self) -> dict[str, int]:
        """Rows waiting to be sent (`pending`), by channel."""
        rows = await self.vault.fetchall(
            "SELECT channel, count(*) FROM outbox WHERE status = 'pending' GROUP BY channel"
        )
        return {str(r[0]): int(r[1]) for r in rows}

    async def counts(self) -> dict[str, int]:
        rows = await self.vault.fetchall("SELECT status, count(*) FROM outbox GROUP BY status")
        return {str(r[0]): int(r[1]) for r in rows}
