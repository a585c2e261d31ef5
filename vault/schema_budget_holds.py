"""Schema of the budget reservations replicas share on PostgreSQL (`vault/budget_holds.py`).

One row per model call in flight: what it reserved (its estimated tokens and micro-dollars)
against which windows (the payer's local day and month, everyone's UTC day), who made it and
until when the reservation holds (`expires_ms`, the app clock's epoch milliseconds). A call
deletes its row when it settles, in the transaction that adds its real usage to the spend
tables (`vault/schema_limits.py`); a row whose replica died expires instead. On SQLite one
process owns the vault and keeps its reservations in memory, so the table stays empty there.
"""

from __future__ import annotations

from vault.schema import Migration

BUDGET_HOLDS = Migration(
    "budget_holds",
    (
        """CREATE TABLE budget_holds (
            hold TEXT PRIMARY KEY,
            user INTEGER,
            day TEXT,
            month TEXT,
            global_day TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            usd_micros INTEGER NOT NULL,
            owner TEXT NOT NULL,
            expires_ms INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID""",
        "CREATE INDEX budget_holds_user ON budget_holds(user, day)",
        "CREATE INDEX budget_holds_global ON budget_holds(global_day)",
        "CREATE INDEX budget_holds_expiry ON budget_holds(expires_ms)",
    ),
)
