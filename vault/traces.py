"""The last context trace of each chat, saved (`gateway/agent/traces.py` owns its shape).

One row per chat, replaced by every model request (write-behind: a turn never waits for it).
The payload is the trace as JSON; this store does not read it.
"""

from __future__ import annotations

from vault.db import Vault


class TraceLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    def save_soon(self, chat_key: str, at_ms: int, payload: str) -> None:
        self.vault.run_soon(
            lambda raw: raw.execute(
                """INSERT INTO context_traces (chat_key, at_ms, trace) VALUES (?, ?, ?)
                   ON CONFLICT (chat_key) DO UPDATE SET at_ms = excluded.at_ms,
                   trace = excluded.trace WHERE excluded.at_ms >= context_traces.at_ms""",
                (chat_key, at_ms, payload),
            ),
            "context trace",
        )

    async def load(self, chat_key: str) -> tuple[int, str] | None:
        rows = await self.vault.fetchall(
            "SELECT at_ms, trace FROM context_traces WHERE chat_key = ?", (chat_key,)
        )
        return (int(rows[0][0]), str(rows[0][1])) if rows else None
