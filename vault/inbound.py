"""Inbound dedupe: a platform event id seen once is never handled twice, even across restarts.

Keys are namespaced strings such as `telegram:update:123` or `slack:ts:C1:1700000000.1234`.
A message's keys are claimed in the same transaction that records the message
(`vault.conversations`), so a crash leaves either both or neither: a redelivery after a crash
is handled, never silently dropped.
The same table also holds "once per period" markers (e.g. the daily not-authorized notice),
which are the same problem: remember that something happened, atomically.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from vault.db import Vault


def claim(raw: sqlite3.Connection, keys: Sequence[str], now_ms: int) -> bool:
    """Insert every key inside the caller's transaction; True only if none existed."""
    unique = list(dict.fromkeys(keys))
    if not unique:
        return True
    values = ",".join("(?, ?)" for _ in unique)
    inserted = raw.execute(
        f"""INSERT INTO inbound_seen (key, seen_ms) VALUES {values}
            ON CONFLICT (key) DO NOTHING RETURNING key""",
        [item for key in unique for item in (key, now_ms)],
    ).fetchall()
    return len(inserted) == len(unique)


class InboundLog:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def first_sighting(self, keys: Sequence[str], now_ms: int) -> bool:
        """Claim the keys on their own; True only if none of them had been seen before."""
        return await self.vault.run(lambda raw: claim(raw, keys, now_ms))

    async def purge(self, older_than_ms: int) -> int:
        return await self.vault.write_rowcount(
            "DELETE FROM inbound_seen WHERE seen_ms < ?", (older_than_ms,)
        )
