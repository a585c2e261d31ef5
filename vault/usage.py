"""Model calls: one row per request, for `/status`, admin stats and metrics."""

from __future__ import annotations

from dataclasses import dataclass

from vault.db import Vault


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    chat_key: str | None
    purpose: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: int
    ok: bool


class UsageLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def record(self, call: Call, now_ms: int) -> None:
        async with self.vault.transaction() as tx:
            await tx.execute(
                """INSERT INTO llm_calls (at_ms, chat_key, purpose, model, input_tokens,
                                          output_tokens, latency_ms, ok)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    now_ms,
                    call.chat_key,
                    call.purpose,
                    call.model,
                    call.input_tokens,
                    call.output_tokens,
                    call.latency_ms,
                    int(call.ok),
                ),
            )

    async def totals(self, since_ms: int) -> tuple[int, int, int]:
        """(calls, input tokens, output tokens) since a time."""
        row = await self.vault.fetchone(
            """SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0)
               FROM llm_calls WHERE at_ms >= ?""",
            (since_ms,),
        )
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])
