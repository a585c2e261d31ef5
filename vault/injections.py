"""The injection audit: every document injected into a session, with the content hash it had,
the exact text given (a snapshot, stored once per distinct text) and why.

This table is the source of truth for staleness: a session's working set is the latest
injection of each document in it, and "changed since last injection" means the document's
current content hash differs from the one recorded there. Nothing else remembers what a
session was given, so a restart loses nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from vault.db import Vault

REFRESH_REASONS = ("changed", "requested")


@dataclass(frozen=True, slots=True, kw_only=True)
class NewInjection:
    session: int
    chat: int
    document: int
    content_hash: str
    snapshot: str  # hash of `text`
    text: str
    tokens: int
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Injection:
    id: int
    document: int
    content_hash: str
    snapshot: str
    tokens: int
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Given:
    """The latest injection of one document in a session, with the text it gave."""

    injection: Injection
    text: str


def _injection(row: sqlite3.Row) -> Injection:
    return Injection(
        id=row["id"],
        document=row["document"],
        content_hash=row["content_hash"],
        snapshot=row["snapshot"],
        tokens=row["tokens"],
        reason=row["reason"],
        at_ms=row["at_ms"],
    )


class InjectionLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def record(self, rows: Sequence[NewInjection]) -> None:
        if not rows:
            return

        def body(raw: sqlite3.Connection) -> None:
            raw.executemany(
                "INSERT OR IGNORE INTO knowledge_snapshots (hash, text, tokens) VALUES (?, ?, ?)",
                [(r.snapshot, r.text, r.tokens) for r in rows],
            )
            raw.executemany(
                """INSERT INTO context_injections (session, chat, document, content_hash,
                       snapshot, tokens, reason, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    (r.session, r.chat, r.document, r.content_hash, r.snapshot, r.tokens,
                     r.reason, r.at_ms)
                    for r in rows
                ],
            )  # fmt: skip

        await self.vault.run(body)

    async def working_set(self, session: int) -> dict[int, Given]:
        """The latest injection of every document given in this session, by document."""
        rows = await self.vault.fetchall(
            """SELECT i.id, i.document, i.content_hash, i.snapshot, i.tokens, i.reason, i.at_ms,
                      s.text FROM context_injections i
               JOIN knowledge_snapshots s ON s.hash = i.snapshot
               WHERE i.id IN (SELECT max(id) FROM context_injections WHERE session = ?
                              GROUP BY document)""",
            (session,),
        )
        return {r["document"]: Given(injection=_injection(r), text=r["text"]) for r in rows}

    async def last_refresh_ms(self, session: int) -> int | None:
        """When this session last had a document refreshed (the cooldown counts from it)."""
        found = await self.vault.scalar(
            """SELECT max(at_ms) FROM context_injections
               WHERE session = ? AND reason IN (?, ?)""",
            (session, *REFRESH_REASONS),
        )
        return None if found is None else int(found)

    async def history(self, chat: int, document: int, limit: int = 10) -> list[Injection]:
        """The injections of one document in one chat, newest first (every session)."""
        rows = await self.vault.fetchall(
            """SELECT id, document, content_hash, snapshot, tokens, reason, at_ms
               FROM context_injections WHERE chat = ? AND document = ?
               ORDER BY id DESC LIMIT ?""",
            (chat, document, limit),
        )
        return [_injection(r) for r in rows]
