"""The injection audit: every document injected into a session, with the content hash it had,
the exact text given (a snapshot, stored once per distinct text) and why.

This table is the source of truth for staleness: a session's working set is the latest
injection of each document in it, and "changed since last injection" means the document's
current content hash differs from the one recorded there. Nothing else remembers what a
session was given, so a restart loses nothing. Rows are written only for requests the model
answered (`record`, after the call): a request that failed gave nothing.

`/context refresh` requests (`context_refresh_requests`) are kept here too: when the session
asked for its `on_request` documents to be refreshed, and whether that is still to happen.
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


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionState:
    """What staleness decisions read about one session, in one read."""

    given: dict[int, Given]  # the working set, by document
    last_refresh_ms: int | None  # the latest `changed`/`requested` injection
    refresh_requested: bool  # a `/context refresh` not yet carried out


class InjectionLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def record(
        self, rows: Sequence[NewInjection], *, refreshed_session: int | None = None
    ) -> None:
        """The injections of one answered request; `refreshed_session`: its pending
        `/context refresh` was carried out (cleared in the same transaction)."""
        if not rows and refreshed_session is None:
            return

        def body(raw: sqlite3.Connection) -> None:
            if refreshed_session is not None:
                raw.execute(
                    "UPDATE context_refresh_requests SET pending = 0 WHERE session = ?",
                    (refreshed_session,),
                )
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
        return await self.vault.read(lambda raw: _working_set_in(raw, session))

    async def last_refresh_ms(self, session: int) -> int | None:
        """When this session last had a document refreshed (the cooldown counts from it)."""
        return await self.vault.read(lambda raw: _last_refresh_in(raw, session))

    async def session_state(self, session: int) -> SessionState:
        """The working set, the last refresh and a pending `/context refresh`, in one hop."""

        def body(raw: sqlite3.Connection) -> SessionState:
            pending = raw.execute(
                "SELECT pending FROM context_refresh_requests WHERE session = ?", (session,)
            ).fetchone()
            return SessionState(
                given=_working_set_in(raw, session),
                last_refresh_ms=_last_refresh_in(raw, session),
                refresh_requested=bool(pending is not None and pending[0]),
            )

        return await self.vault.read(body)

    async def request_refresh(self, session: int, now_ms: int) -> None:
        """`/context refresh`: the session's next answered request refreshes what changed."""
        await self.vault.write(
            """INSERT INTO context_refresh_requests (session, requested_ms, pending)
               VALUES (?, ?, 1)
               ON CONFLICT (session) DO UPDATE SET requested_ms = excluded.requested_ms,
                   pending = 1""",
            (session, now_ms),
        )

    async def last_request_ms(self, session: int) -> int | None:
        """When this session last asked for `/context refresh` (its own cooldown)."""
        found = await self.vault.scalar(
            "SELECT requested_ms FROM context_refresh_requests WHERE session = ?", (session,)
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


def _working_set_in(raw: sqlite3.Connection, session: int) -> dict[int, Given]:
    rows = raw.execute(
        """SELECT i.id, i.document, i.content_hash, i.snapshot, i.tokens, i.reason, i.at_ms,
                  s.text FROM context_injections i
           JOIN knowledge_snapshots s ON s.hash = i.snapshot
           WHERE i.id IN (SELECT max(id) FROM context_injections WHERE session = ?
                          GROUP BY document)""",
        (session,),
    ).fetchall()
    return {r["document"]: Given(injection=_injection(r), text=r["text"]) for r in rows}


def _last_refresh_in(raw: sqlite3.Connection, session: int) -> int | None:
    found = raw.execute(
        "SELECT max(at_ms) FROM context_injections WHERE session = ? AND reason IN (?, ?)",
        (session, *REFRESH_REASONS),
    ).fetchone()[0]
    return None if found is None else int(found)
