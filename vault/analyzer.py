"""The context analyzer's storage: per-session state and the suggestion counters.

State lives in `sessions.analyzer_state` (JSON), so `/clear` and `/compact`, which open a new
session, reset it without any extra code. The counters are an append-only event table
(`analyzer_events`: one row per suggestion shown or followed) rather than running totals, so
the admin stats can ask for any window (24 hours, 30 days) with one indexed range query.
A state change and its event are written in one transaction: a crash never counts a
suggestion that the state does not remember, or the reverse.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from vault.db import Vault

log = logging.getLogger(__name__)

EventKind = Literal["shown", "followed"]
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    kind: EventKind
    command: str  # "clear" or "compact"
    chat: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SuggestionCounts:
    shown_clear: int = 0
    shown_compact: int = 0
    followed_clear: int = 0
    followed_compact: int = 0

    @property
    def shown(self) -> int:
        return self.shown_clear + self.shown_compact

    @property
    def followed(self) -> int:
        return self.followed_clear + self.followed_compact


class AnalyzerStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    @staticmethod
    def parse(session: int, raw: str | None) -> dict[str, Any]:
        """The session's state from its stored JSON (the record step read it with the session);
        `{}` for a new session, or when the stored JSON is unusable."""
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            log.warning("unreadable analyzer state of session %d; starting afresh", session)
            return {}
        return data if isinstance(data, dict) else {}

    def save(
        self, session: int, state: dict[str, Any], *, now_ms: int, event: Event | None = None
    ) -> str:
        """Write-behind (`Vault.run_soon`): the turn goes on at once; the state commits before
        any later write, so the session's next message reads it. Returns the stored JSON."""
        text = json.dumps(state, ensure_ascii=False, separators=(",", ":"))

        def save(raw: sqlite3.Connection) -> None:
            raw.execute("UPDATE sessions SET analyzer_state = ? WHERE id = ?", (text, session))
            if event is not None:
                raw.execute(
                    """INSERT INTO analyzer_events (at_ms, chat, session, event, command)
                       VALUES (?, ?, ?, ?, ?)""",
                    (now_ms, event.chat, session, event.kind, event.command),
                )

        self.vault.run_soon(save, f"analyzer state of session {session}")
        return text

    async def counts(self, since_ms: int) -> SuggestionCounts:
        rows = await self.vault.fetchall(
            """SELECT event, command, count(*) FROM analyzer_events WHERE at_ms >= ?
               GROUP BY event, command""",
            (since_ms,),
        )
        return SuggestionCounts(**{f"{row[0]}_{row[1]}": int(row[2]) for row in rows})

    async def totals(self) -> dict[tuple[str, str], int]:
        """Every suggestion ever shown or followed: (event, command) -> count, for the
        `iris_analyzer_suggestions_total` counter. Pairs never recorded are absent."""
        rows = await self.vault.fetchall(
            """SELECT event, command, count(*) FROM analyzer_events
               GROUP BY event, command ORDER BY event, command"""
        )
        return {(str(row[0]), str(row[1])): int(row[2]) for row in rows}

    async def stats(self, now_ms: int) -> dict[str, SuggestionCounts]:
        """The windows the admin stats show: the last 24 hours and the last 30 days."""
        return {
            "24h": await self.counts(now_ms - DAY_MS),
            "30d": await self.counts(now_ms - 30 * DAY_MS),
        }
