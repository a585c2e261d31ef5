"""The durable intake: every inbound message is saved here before the platform is told it
arrived (Telegram's offset, a webhook's 200, Slack's ack), and removed when its turn ends.

Why: a channel that confirms first and saves later loses whatever arrived in between when the
process dies — and a message waited unsaved for as long as its chat was busy. Saving a batch
is one batched write (`Vault.run`), so intake costs one commit per platform batch, and the
turns are scheduled only after it. At start, whatever is still here (confirmed, never
finished) is replayed in arrival order; the record step's dedupe keys make a replay of a
message that was recorded already a resume, never a second copy.

`key` is the delivery's first platform id (unique: a platform's redelivery of a message still
waiting here is absorbed at once). A payload the intake cannot read — a platform update that
does not translate, or a saved row from a format this version cannot parse — is kept as
`rejected` with the reason, confirmed to the platform, and never retried.

On PostgreSQL several replicas share this table; which of them runs a chat's rows, and when
another takes them over, is the per-chat claim in `vault/intake_claims.py`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.messages import ChatKind, ChatRef, Inbound, RejectedInbound, UserRef
from vault.db import Vault
from vault.served import served_clause

FORMAT = 1  # version of the payload's JSON shape; a reader accepts this one and older


@dataclass(frozen=True, slots=True)
class Pending:
    id: int
    received_ms: int
    inbound: Inbound


def intake_key(inbound: Inbound) -> str:
    if inbound.dedupe_keys:
        return inbound.dedupe_keys[0]
    return f"{inbound.chat.key}:msg:{inbound.message_id}"


def to_json(inbound: Inbound) -> str:
    chat, user = inbound.chat, inbound.user
    return json.dumps(
        {
            "v": FORMAT,
            "chat": [chat.channel, chat.chat_id, chat.thread_id],
            "user": [user.channel, user.user_id, user.display_name],
            "text": inbound.text,
            "message_id": inbound.message_id,
            "kind": inbound.kind.value,
            "mentioned": inbound.mentioned,
            "reply_to_bot": inbound.reply_to_bot,
            "at_ms": inbound.at_ms,
            "dedupe_keys": list(inbound.dedupe_keys),
        },
        ensure_ascii=False,
    )


def from_json(payload: str) -> Inbound:
    """The saved message; ValueError if this version cannot read it."""
    try:
        data: dict[str, Any] = json.loads(payload)
        if not isinstance(data, dict) or int(data.get("v", 0)) > FORMAT:
            raise ValueError(f"payload format {data.get('v')!r} is newer than this Iris")
        channel, chat_id, thread = data["chat"]
        user_channel, user_id, name = data["user"]
        return Inbound(
            chat=ChatRef(channel=str(channel), chat_id=str(chat_id), thread_id=thread),
            user=UserRef(channel=str(user_channel), user_id=str(user_id), display_name=str(name)),
            text=str(data["text"]),
            message_id=str(data.get("message_id", "")),
            kind=ChatKind(data.get("kind", "dm")),
            mentioned=bool(data.get("mentioned", False)),
            reply_to_bot=bool(data.get("reply_to_bot", False)),
            at_ms=int(data.get("at_ms", 0)),
            dedupe_keys=tuple(str(k) for k in data.get("dedupe_keys", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"unreadable intake payload: {type(exc).__name__}: {exc}") from exc


def admit_in(
    raw: sqlite3.Connection, items: Sequence[Inbound | RejectedInbound], now_ms: int
) -> list[tuple[int, Inbound]]:
    """`IntakeStore.admit`'s statements, for a body that does more in the same transaction
    (the claim of each chat on PostgreSQL: `vault/intake_claims.py`)."""
    admitted = []
    for item in items:
        if isinstance(item, RejectedInbound):
            raw.execute(
                """INSERT INTO intake (channel, key, chat_key, payload, received_ms,
                                       state, reason)
                   VALUES (?, ?, '', ?, ?, 'rejected', ?)
                   ON CONFLICT (key) DO NOTHING""",
                (item.channel, item.key, item.raw, now_ms, item.reason),
            )
            continue
        row = raw.execute(
            """INSERT INTO intake (channel, key, chat_key, payload, received_ms)
               VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING RETURNING id""",
            (item.chat.channel, intake_key(item), item.chat.key, to_json(item), now_ms),
        ).fetchone()
        if row is not None:
            admitted.append((int(row[0]), item))
    return admitted


class IntakeStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def admit(
        self, items: Sequence[Inbound | RejectedInbound], now_ms: int
    ) -> list[tuple[int, Inbound]]:
        """Save a batch in one write; the new rows' ids with their messages, in order.

        A message whose key is here already (a redelivery of one still waiting) is left out.
        """
        return await self.vault.run(lambda raw: admit_in(raw, items, now_ms))

    def finish_soon(self, row_id: int) -> None:
        """The turn ended: forget the row (write-behind; a crash before it lands replays the
        message, and the replay finds it answered)."""
        self.vault.run_soon(
            lambda raw: raw.execute("DELETE FROM intake WHERE id = ?", (row_id,)), "intake finish"
        )

    async def pending(
        self, channels: Sequence[str] | None = None
    ) -> tuple[list[Pending], list[int]]:
        """Rows to replay in arrival order (of `channels` only, when given), and the ids of
        rows this version cannot read (marked rejected here)."""
        only, names = served_clause("channel", channels)
        rows = await self.vault.fetchall(
            f"SELECT id, payload, received_ms FROM intake WHERE state = 'pending'{only}"
            " ORDER BY id",
            names,
        )
        readable: list[Pending] = []
        unreadable: list[tuple[int, str]] = []
        for row in rows:
            try:
                readable.append(Pending(row[0], row[2], from_json(row[1])))
            except ValueError as exc:
                unreadable.append((row[0], str(exc)[:300]))
        if unreadable:
            await self.vault.run(
                lambda raw: raw.executemany(
                    "UPDATE intake SET state = 'rejected', reason = ? WHERE id = ?",
                    [(reason, row_id) for row_id, reason in unreadable],
                )
            )
        return readable, [row_id for row_id, _ in unreadable]

    async def counts(self) -> dict[str, int]:
        rows = await self.vault.fetchall("SELECT state, count(*) FROM intake GROUP BY state")
        return {str(r[0]): int(r[1]) for r in rows}
