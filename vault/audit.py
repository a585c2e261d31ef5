"""The audit log: every admin action, from chat or HTTP, with its actor, arguments and outcome.

Append-only. Refusals are recorded too (a non-admin trying `/admin`, a request with a wrong
token is not — it has no actor — but a valid admin action that failed is). `result` is a short
summary meant for humans, never a secret or a whole payload.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vault.db import Vault


class Outcome(StrEnum):
    OK = "ok"
    REFUSED = "refused"
    ERROR = "error"


RESULT_LIMIT = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    id: int
    at_ms: int
    actor: str
    via: str
    action: str
    args: dict[str, Any]
    outcome: str
    result: str


class AuditLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def record(
        self,
        *,
        actor: str,
        via: str,
        action: str,
        args: dict[str, Any],
        outcome: Outcome,
        result: str,
        now_ms: int,
    ) -> int:
        rows = await self.vault.write(
            """INSERT INTO audit_log (at_ms, actor, via, action, args, outcome, result)
               VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id""",
            (
                now_ms,
                actor,
                via,
                action,
                json.dumps(args, ensure_ascii=False, default=str),
                outcome,
                result[:RESULT_LIMIT],
            ),
        )
        return int(rows[0][0])

    async def recent(self, *, since_ms: int = 0, limit: int = 50) -> list[AuditEntry]:
        """Newest first."""
        rows = await self.vault.fetchall(
            """SELECT id, at_ms, actor, via, action, args, outcome, result FROM audit_log
               WHERE at_ms >= ? ORDER BY id DESC LIMIT ?""",
            (since_ms, limit),
        )
        return [AuditEntry(**{**dict(r), "args": json.loads(r["args"])}) for r in rows]
