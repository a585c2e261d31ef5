"""Model calls: one row per request (tokens in, out, and read from or written to the prompt
cache), for `/status`, admin stats and metrics.

Rows are buffered and written in batches: a write per model call would be a sizeable share of
a turn's vault time, and the figures are statistics. Every read flushes first, so what is
reported is exact; a crash can lose at most one unflushed batch. The app flushes at shutdown.
"""

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
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


BATCH = 64


class UsageLog:
    def __init__(self, vault: Vault, *, batch: int = BATCH) -> None:
        self.vault = vault
        self._batch = batch
        self._pending: list[tuple[object, ...]] = []

    async def record(self, call: Call, now_ms: int) -> None:
        self._pending.append(
            (
                now_ms,
                call.chat_key,
                call.purpose,
                call.model,
                call.input_tokens,
                call.output_tokens,
                call.latency_ms,
                int(call.ok),
                call.cache_read_tokens,
                call.cache_write_tokens,
            )
        )
        if len(self._pending) >= self._batch:
            await self.flush()

    async def flush(self) -> None:
        rows, self._pending = self._pending, []
        if not rows:
            return
        async with self.vault.transaction() as tx:
            await tx.executemany(
                """INSERT INTO llm_calls (at_ms, chat_key, purpose, model, input_tokens,
                                          output_tokens, latency_ms, ok, cache_read_tokens,
                                          cache_write_tokens)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                rows,
            )

    async def totals(self, since_ms: int) -> tuple[int, int, int]:
        """(calls, input tokens, output tokens) since a time."""
        await self.flush()
        row = await self.vault.fetchone(
            """SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0)
               FROM llm_calls WHERE at_ms >= ?""",
            (since_ms,),
        )
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])
