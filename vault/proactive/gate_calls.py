"""The proactive gate's tool calls: what the model did while deciding about a due item.

The gate runs the normal tool loop, so a decision can come with effects — a memory
remembered, another follow-up registered or cancelled. Those effects are the tools' own rows
(`memories`, `proactive_intents`); this store keeps the calls beside the item they were made
for, so `/why` can say what happened even when nothing was sent, and a re-run of the same
item (after a crash, a model outage or a defer) can show the model what it already did.

A call is identified by (item, tool, arguments): the same call made again is not recorded
twice (`INSERT OR IGNORE` on that key), and the first result stays.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from vault.db import Vault
from vault.proactive.items import Source

RESULT_CHARS = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class GateCall:
    tool: str
    input: dict[str, Any]
    result: str
    is_error: bool
    at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Considered:
    """An item the gate ran tools for, with its state now (for `/why`)."""

    source: Source
    id: int
    kind: str
    what: str
    status: str
    reason: str
    at_ms: int  # the latest tool call's time
    calls: list[GateCall]


def record_in(
    raw: sqlite3.Connection,
    *,
    source: Source,
    item_id: int,
    user: int,
    chat: int,
    tool: str,
    input: dict[str, Any],
    result: str,
    is_error: bool,
    now_ms: int,
) -> bool:
    """Keep one call; False if this very call (item, tool, arguments) was already kept."""
    changed = raw.execute(
        """INSERT OR IGNORE INTO proactive_gate_calls
               (source, item_id, user, chat, tool, input, result, is_error, at_ms)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (source, item_id, user, chat, tool, json.dumps(input, sort_keys=True),
         result[:RESULT_CHARS], int(is_error), now_ms),
    ).rowcount  # fmt: skip
    return bool(changed == 1)


def _call(row: Any) -> GateCall:
    return GateCall(
        tool=str(row["tool"]),
        input=json.loads(row["input"]),
        result=str(row["result"]),
        is_error=bool(row["is_error"]),
        at_ms=int(row["at_ms"]),
    )


class GateCalls:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def record(
        self,
        *,
        source: Source,
        item_id: int,
        user: int,
        chat: int,
        tool: str,
        input: dict[str, Any],
        result: str,
        is_error: bool,
        now_ms: int,
    ) -> bool:
        return await self.vault.run(
            lambda raw: record_in(
                raw, source=source, item_id=item_id, user=user, chat=chat, tool=tool,
                input=input, result=result, is_error=is_error, now_ms=now_ms,
            )
        )  # fmt: skip

    async def of_item(self, source: Source, item_id: int) -> list[GateCall]:
        rows = await self.vault.fetchall(
            """SELECT tool, input, result, is_error, at_ms FROM proactive_gate_calls
               WHERE source = ? AND item_id = ? ORDER BY id""",
            (source, item_id),
        )
        return [_call(r) for r in rows]

    async def last_considered(self, user: int, chat: int | None = None) -> Considered | None:
        """The user's item the gate most recently ran tools for (in `chat`, if given)."""
        where = "user = ?" + (" AND chat = ?" if chat is not None else "")
        params: tuple[int, ...] = (user,) if chat is None else (user, chat)
        row = await self.vault.fetchone(
            f"""SELECT g.source, g.item_id, g.at,
                       coalesce(i.kind, t.type) AS kind, coalesce(i.what, t.context) AS what,
                       coalesce(i.status, t.status) AS status,
                       coalesce(i.reason, t.reason) AS reason
                FROM (SELECT source, item_id, max(at_ms) AS at FROM proactive_gate_calls
                      WHERE {where} GROUP BY source, item_id ORDER BY at DESC, item_id DESC
                      LIMIT 1) g
                LEFT JOIN proactive_intents i ON g.source = 'intent' AND i.id = g.item_id
                LEFT JOIN proactive_triggers t ON g.source = 'trigger' AND t.id = g.item_id""",
            params,
        )
        return None if row is None else await self._considered(row, "item_id", "at")

    async def last_unsent(self, user: int, chat: int | None = None) -> Considered | None:
        """The user's item that most recently ended without a message (skipped by the gate,
        the policy or a budget; expired; failed: not `uncertain`, which may have gone out),
        tool calls or not (in `chat`, if given); `at_ms` is when it ended."""
        where = "user = ? AND finished_at IS NOT NULL"
        where += " AND status IN ('skipped', 'expired', 'failed')"  # uncertain: may have gone
        where += " AND chat = ?" if chat is not None else ""
        params: tuple[int, ...] = (user,) if chat is None else (user, chat)
        row = await self.vault.fetchone(
            f"""SELECT * FROM (
                  SELECT 'intent' AS source, id, kind, what, status, reason, finished_at
                  FROM proactive_intents WHERE {where}
                  UNION ALL
                  SELECT 'trigger', id, type, context, status, reason, finished_at
                  FROM proactive_triggers WHERE {where})
                ORDER BY finished_at DESC, id DESC LIMIT 1""",
            params * 2,
        )
        return None if row is None else await self._considered(row, "id", "finished_at")

    async def _considered(self, row: Any, id_column: str, at_column: str) -> Considered:
        """A row of `last_considered` or `last_unsent` (source, kind, what, status, reason),
        with the item's id and time under the given names, and the item's tool calls."""
        source: Source = "intent" if row["source"] == "intent" else "trigger"
        item = int(row[id_column])
        return Considered(
            source=source,
            id=item,
            kind=str(row["kind"] or ""),
            what=str(row["what"] or ""),
            status=str(row["status"] or ""),
            reason=str(row["reason"] or ""),
            at_ms=int(row[at_column]),
            calls=await self.of_item(source, item),
        )
