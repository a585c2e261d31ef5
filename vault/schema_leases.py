"""Schema for replicas sharing one vault (`vault/outbox.py`, `vault/periodic.py`): who holds an
outbox row, and which replica ran a periodic job in a time slot.

An outbox row that a replica writes or starts sending carries that replica's id (`owner`) and
a lease (`lease_until`) the replica renews while it runs: another replica leaves a held row
alone (neither resending it nor settling it `uncertain` at its start) and takes it over only
once the lease has expired. On SQLite there is one process, so both columns stay NULL.

`periodic_runs` has one row per (job name, time slot) ever started: the unique key makes
"run this scan once per slot" a single INSERT that exactly one replica wins, so every replica
can run the periodic loops without a leader.
"""

from __future__ import annotations

from vault.schema import Migration

LEASES = Migration(
    "leases",
    (
        "ALTER TABLE outbox ADD COLUMN owner TEXT",
        "ALTER TABLE outbox ADD COLUMN lease_until INTEGER",
        "CREATE INDEX outbox_owner ON outbox (owner) WHERE status IN ('pending', 'sending')",
        """CREATE TABLE periodic_runs (
            name TEXT NOT NULL,
            slot INTEGER NOT NULL,
            replica TEXT NOT NULL,
            started_ms INTEGER NOT NULL,
            PRIMARY KEY (name, slot)
        ) STRICT""",
    ),
)
