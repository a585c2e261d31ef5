"""Read-only figures over the proactive tables for the simulator's report.

The report (`proactive/sim_report.py`) checks the engine from the outside: it maps each
message the channel received back to its item and that user's zone and settings, and counts
items by status and type, items deferred at least once, items left claimed or delivering, and
which delivered messages were engaged (for engagement over time).
Those reads live here, beside the tables' other stores, so that SQL stays in the vault; they
return typed values, never `sqlite3.Row`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from vault.db import Vault
from vault.proactive.items import TABLES, Source

# What a count groups by: the lifecycle state, or an intent's kind / a trigger's type.
CountedBy = Literal["status", "kind"]
_KIND_COLUMN = {"intent": "kind", "trigger": "type"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportItem:
    """An intent or trigger with its user's zone and settings, as stored now."""

    source: Source
    id: int
    user_pk: int
    kind: str  # 'ai' | 'user_reminder' for intents, the trigger type for triggers
    exact_time: bool
    timezone: str | None
    settings: dict[str, Any]


class ProactiveReport:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def items(self) -> list[ReportItem]:
        """Every intent, then every trigger, whatever its state."""
        rows = await self.vault.fetchall(
            """SELECT 'intent' AS source, i.id, i.user, i.kind, i.exact_time, u.timezone,
                      u.settings FROM proactive_intents i JOIN users u ON u.id = i.user
               UNION ALL
               SELECT 'trigger', t.id, t.user, t.type, 0, u.timezone, u.settings
               FROM proactive_triggers t JOIN users u ON u.id = t.user"""
        )
        return [
            ReportItem(
                source="intent" if r[0] == "intent" else "trigger",
                id=int(r[1]),
                user_pk=int(r[2]),
                kind=str(r[3]),
                exact_time=bool(r[4]),
                timezone=r[5],
                settings=json.loads(r[6]),
            )
            for r in rows
        ]

    async def counts(self, source: Source, by: CountedBy) -> dict[str, int]:
        """Rows of one table per value of `by`, in the order of those values."""
        column = "status" if by == "status" else _KIND_COLUMN[source]
        rows = await self.vault.fetchall(
            f"""SELECT {column}, count(*) FROM {TABLES[source]}
                GROUP BY {column} ORDER BY {column}"""
        )
        return {str(r[0]): int(r[1]) for r in rows}

    async def deferred_intents(self) -> int:
        """Intents put off at least once (quiet hours, quota, the gate's defer)."""
        found = await self.vault.scalar(
            "SELECT count(*) FROM proactive_intents WHERE deferrals > 0"
        )
        return int(found)

    async def unfinished(self) -> int:
        """Intents and triggers left mid-run: delivering, or pending yet still claimed."""
        found = await self.vault.scalar(
            """SELECT (SELECT count(*) FROM proactive_intents WHERE status = 'delivering'
                       OR (status = 'pending' AND claim IS NOT NULL))
                    + (SELECT count(*) FROM proactive_triggers WHERE status = 'delivering'
                       OR (status = 'pending' AND claim IS NOT NULL))"""
        )
        return int(found)

    async def engagement(self) -> list[tuple[int, bool]]:
        """(sent_at, engaged) of every delivered proactive message, in time order."""
        rows = await self.vault.fetchall(
            "SELECT sent_at, engaged FROM proactive_log WHERE status = 'sent' ORDER BY sent_at"
        )
        return [(int(r[0]), bool(r[1])) for r in rows]

    async def log_days(self) -> dict[int, int]:
        """Proactive log rows per UTC day (days since the epoch) of their `sent_at`, whatever
        their state: at least what the global quota counted on that day at any time."""
        rows = await self.vault.fetchall(
            "SELECT sent_at / 86400000, count(*) FROM proactive_log GROUP BY sent_at / 86400000"
        )
        return {int(r[0]): int(r[1]) for r in rows}
