"""Periodic jobs run once per time slot across replicas, with no leader.

Every replica runs the same schedule loops (the proactive scan, …) and computes the same slot
for a run (the scheduled instant, UTC ms). Before running, it inserts (job name, slot) into
`periodic_runs` (`vault/schema_leases.py`); the primary key lets exactly one INSERT win, so
one replica runs the job for that slot and the others skip it. A replica that wins and then
dies mid-run leaves that slot unrun: the job's next slot catches up (the scans are idempotent
and look back over what they missed), which is the same as a single process that crashed.
On SQLite the table works the same with its one process.
"""

from __future__ import annotations

from vault.db import Vault

KEEP_MS = 30 * 86_400_000  # rows older than this are purged


class PeriodicRuns:
    def __init__(self, vault: Vault, replica: str) -> None:
        self.vault = vault
        self.replica = replica

    async def claim(self, name: str, slot_ms: int, now_ms: int) -> bool:
        """True if this replica is the one to run `name` for `slot_ms` (first to ask)."""
        won = await self.vault.write(
            """INSERT INTO periodic_runs (name, slot, replica, started_ms) VALUES (?, ?, ?, ?)
               ON CONFLICT (name, slot) DO NOTHING RETURNING slot""",
            (name, slot_ms, self.replica, now_ms),
        )
        if won:
            await self.vault.write(
                "DELETE FROM periodic_runs WHERE name = ? AND started_ms < ?",
                (name, now_ms - KEEP_MS),
            )
        return bool(won)

    async def runner(self, name: str, slot_ms: int) -> str | None:
        """The replica that claimed the slot, if any."""
        found = await self.vault.scalar(
            "SELECT replica FROM periodic_runs WHERE name = ? AND slot = ?", (name, slot_ms)
        )
        return None if found is None else str(found)
