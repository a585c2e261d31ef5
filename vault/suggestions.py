"""The suggestion store: what the finder reads besides the knowledge index and the memories,
and the lifecycle of every suggestion shown in a chat (schema in `vault/schema_suggestions.py`).

The finder's reads are scoped by construction: follow-ups take the owning user and the chat,
and the chat's last-given versions take the chat. The lifecycle is pending (written before its
block is sent) -> shown -> used | dismissed; `decide` only moves a shown item of this chat, so
feedback can never reach another chat's suggestion.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from vault.db import Vault

_ROW = """id, chat, user, block, ordinal, item_key, type, title, summary, content, relevance,
    reason, status, created_ms, shown_ms, decided_ms, applied_ms"""


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowUp:
    id: int
    what: str
    why: str
    execute_at: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkText:
    id: int
    document: int
    heading: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NewSuggestion:
    item_key: str
    type: str
    title: str
    summary: str
    content: str
    relevance: float
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SuggestionRow:
    id: int
    chat: int
    user: int
    block: int
    ordinal: int
    item_key: str
    type: str
    title: str
    summary: str
    content: str
    relevance: float
    reason: str
    status: str
    created_ms: int
    shown_ms: int | None
    decided_ms: int | None
    applied_ms: int | None


def _row(r: sqlite3.Row) -> SuggestionRow:
    return SuggestionRow(**dict(r))


@dataclass(frozen=True, slots=True)
class TypeCounts:
    shown: int
    used: int
    dismissed: int


class SuggestionStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        # The chats with a used item not yet given to the model (read once, then kept by
        # `decide` and `take_used`), so `take_used` does not write in every turn. Only on
        # SQLite, where this process is the only one deciding; replicas sharing PostgreSQL
        # always look.
        self._unapplied: set[int] = set()
        self._unapplied_read = False

    # --- what the finder reads ----------------------------------------------------------

    async def followups(
        self, user: int, chat: int, *, before_ms: int, limit: int = 50
    ) -> list[FollowUp]:
        """The user's pending follow-ups (intents) in this chat registered before `before_ms`,
        soonest first."""
        rows = await self.vault.fetchall(
            """SELECT id, what, why, execute_at FROM proactive_intents
               WHERE user = ? AND chat = ? AND status = 'pending' AND created_at < ?
               ORDER BY execute_at LIMIT ?""",
            (user, chat, before_ms, limit),
        )
        return [FollowUp(**dict(r)) for r in rows]

    async def has_followups(self, user: int, chat: int, *, before_ms: int) -> bool:
        """Whether `followups` would find anything (one indexed probe instead of the rows)."""
        found = await self.vault.scalar(
            """SELECT EXISTS (SELECT 1 FROM proactive_intents
               WHERE user = ? AND chat = ? AND status = 'pending' AND created_at < ?)""",
            (user, chat, before_ms),
        )
        return bool(found)

    async def last_given(self, chat: int, documents: Collection[int]) -> dict[int, str]:
        """The content hash of each document's latest injection in this chat (any session)."""
        if not documents:
            return {}
        rows = await self.vault.fetchall(
            """SELECT document, content_hash FROM context_injections
               WHERE id IN (SELECT max(id) FROM context_injections
                            WHERE chat = ? AND document IN (SELECT value FROM json_each(?))
                            GROUP BY document)""",
            (chat, json.dumps(sorted(documents))),
        )
        return {r["document"]: r["content_hash"] for r in rows}

    async def chunks(self, ids: Collection[int]) -> dict[int, ChunkText]:
        if not ids:
            return {}
        rows = await self.vault.fetchall(
            """SELECT id, document, heading, text FROM knowledge_chunks
               WHERE id IN (SELECT value FROM json_each(?))""",
            (json.dumps(sorted(ids)),),
        )
        return {r["id"]: ChunkText(**dict(r)) for r in rows}

    # --- the rules of showing ------------------------------------------------------------

    async def recent_keys(self, chat: int, since_ms: int) -> set[str]:
        """Items offered in this chat since `since_ms`, and every item dismissed here."""
        rows = await self.vault.fetchall(
            """SELECT DISTINCT item_key FROM suggestions
               WHERE chat = ? AND (created_ms >= ? OR status = 'dismissed')""",
            (chat, since_ms),
        )
        return {r[0] for r in rows}

    async def dismissed_titles(self, chat: int, limit: int = 50) -> list[str]:
        rows = await self.vault.fetchall(
            """SELECT title || ' ' || summary FROM suggestions
               WHERE chat = ? AND status = 'dismissed' ORDER BY id DESC LIMIT ?""",
            (chat, limit),
        )
        return [r[0] for r in rows]

    async def last_block_ms(self, chat: int) -> int | None:
        found = await self.vault.scalar(
            "SELECT max(created_ms) FROM suggestions WHERE chat = ? AND status != 'pending'",
            (chat,),
        )
        return None if found is None else int(found)

    async def is_off(self, user: int, chat: int) -> bool:
        return bool(
            await self.vault.scalar(
                """SELECT EXISTS (SELECT 1 FROM suggestions_off
                   WHERE (kind = 'user' AND ref = ?) OR (kind = 'chat' AND ref = ?))""",
                (user, chat),
            )
        )

    async def set_off(self, kind: str, ref: int, off: bool, now_ms: int) -> None:
        if off:
            await self.vault.write(
                """INSERT INTO suggestions_off (kind, ref, changed_ms) VALUES (?, ?, ?)
                   ON CONFLICT (kind, ref) DO UPDATE SET changed_ms = excluded.changed_ms""",
                (kind, ref, now_ms),
            )
        else:
            await self.vault.write(
                "DELETE FROM suggestions_off WHERE kind = ? AND ref = ?", (kind, ref)
            )

    # --- the lifecycle -------------------------------------------------------------------

    async def add_block(
        self, *, chat: int, user: int, items: Sequence[NewSuggestion], now_ms: int
    ) -> list[int]:
        """Write a block's items as pending; their ids, in order (ordinals from 1)."""

        def body(raw: sqlite3.Connection) -> list[int]:
            ids: list[int] = []
            for n, item in enumerate(items, start=1):
                cur = raw.execute(
                    """INSERT INTO suggestions (chat, user, block, ordinal, item_key, type, title,
                           summary, content, relevance, reason, created_ms)
                       VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                    (chat, user, n, item.item_key, item.type, item.title, item.summary,
                     item.content, item.relevance, item.reason, now_ms),
                )  # fmt: skip
                ids.append(int(cur.fetchone()[0]))
            if ids:
                raw.execute(
                    "UPDATE suggestions SET block = ? WHERE id IN (SELECT value FROM json_each(?))",
                    (ids[0], json.dumps(ids)),
                )
            return ids

        return await self.vault.run(body)

    async def mark_shown(self, ids: Collection[int], now_ms: int) -> None:
        await self.vault.write(
            """UPDATE suggestions SET status = 'shown', shown_ms = ?
               WHERE id IN (SELECT value FROM json_each(?)) AND status = 'pending'""",
            (now_ms, json.dumps(sorted(ids))),
        )

    async def get(self, suggestion: int) -> SuggestionRow | None:
        row = await self.vault.fetchone(
            f"SELECT {_ROW} FROM suggestions WHERE id = ?", (suggestion,)
        )
        return None if row is None else _row(row)

    async def latest_block(self, chat: int) -> list[SuggestionRow]:
        rows = await self.vault.fetchall(
            f"""SELECT {_ROW} FROM suggestions WHERE chat = ? AND block = (
                    SELECT max(block) FROM suggestions WHERE chat = ? AND status != 'pending')
                ORDER BY ordinal""",
            (chat, chat),
        )
        return [_row(r) for r in rows]

    async def decide(self, suggestion: int, chat: int, status: str, now_ms: int) -> bool:
        """shown -> used | dismissed, for a suggestion of this chat; False otherwise."""
        if status == "used":
            self._unapplied.add(chat)  # before the write: a turn after it will look
        changed = await self.vault.write_rowcount(
            """UPDATE suggestions SET status = ?, decided_ms = ?
               WHERE id = ? AND chat = ? AND status = 'shown'""",
            (status, now_ms, suggestion, chat),
        )
        return changed > 0

    async def take_used(self, chat: int, now_ms: int) -> list[SuggestionRow]:
        """Used items of this chat not yet given to the model; marked given."""
        if self.vault.dialect == "sqlite":
            if not self._unapplied_read:
                rows = await self.vault.fetchall(
                    "SELECT DISTINCT chat FROM suggestions "
                    "WHERE status = 'used' AND applied_ms IS NULL"
                )
                self._unapplied.update(r[0] for r in rows)
                self._unapplied_read = True
            if chat not in self._unapplied:
                return []
            self._unapplied.discard(chat)  # taken below (a `decide` meanwhile adds it again)

        def body(raw: sqlite3.Connection) -> list[SuggestionRow]:
            rows = raw.execute(
                f"""SELECT {_ROW} FROM suggestions
                    WHERE chat = ? AND status = 'used' AND applied_ms IS NULL ORDER BY id""",
                (chat,),
            ).fetchall()
            raw.execute(
                """UPDATE suggestions SET applied_ms = ?
                   WHERE chat = ? AND status = 'used' AND applied_ms IS NULL""",
                (now_ms, chat),
            )
            return [_row(r) for r in rows]

        try:
            return await self.vault.run(body)
        except BaseException:
            self._unapplied.add(chat)  # not taken: look again next time
            raise

    async def type_counts(self, since_ms: int = 0) -> dict[str, TypeCounts]:
        """Per item type: shown (every status but pending), used, dismissed."""
        rows = await self.vault.fetchall(
            """SELECT type, count(*) FILTER (WHERE status != 'pending') AS shown,
                      count(*) FILTER (WHERE status = 'used') AS used,
                      count(*) FILTER (WHERE status = 'dismissed') AS dismissed
               FROM suggestions WHERE created_ms >= ? GROUP BY type""",
            (since_ms,),
        )
        return {r["type"]: TypeCounts(r["shown"], r["used"], r["dismissed"]) for r in rows}
