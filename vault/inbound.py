"""Inbound dedupe: a platform event id seen once is never handled twice, even across restarts.

Keys are namespaced strings such as `telegram:update:123` or `slack:ts:C1:1700000000.1234`.
The same table also holds "once per period" markers (e.g. the daily not-authorized notice),
which are the same problem: remember that something happened, atomically.
"""

from __future__ import annotations

from collections.abc import Sequence

from vault.db import Vault


class InboundLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def first_sighting(self, keys: Sequence[str], now_ms: int) -> bool:
        """Record every key; True only if none of them had been seen before."""
        if not keys:
            return True
        unique = list(dict.fromkeys(keys))
        values = ",".join("(?, ?)" for _ in unique)
        inserted = await self.vault.write(
            f"""INSERT INTO inbound_seen (key, seen_ms) VALUES {values}
                ON CONFLICT (key) DO NOTHING RETURNING key""",
            [item for key in unique for item in (key, now_ms)],
        )
        return len(inserted) == len(unique)

    async def purge(self, older_than_ms: int) -> int:
        return await self.vault.write_rowcount(
            "DELETE FROM inbound_seen WHERE seen_ms < ?", (older_than_ms,)
        )
