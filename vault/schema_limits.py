"""Schema of the spending limits (`vault/spend.py`): what each user and everyone spent per day,
the once-per-window budget notices, and the cache token figures of `llm_calls`.

Spend is kept as daily totals, not derived from `llm_calls`: those rows are buffered for speed
(a crash may lose a batch), while a budget must survive a restart. A user's row is keyed by
the user's *local* date (`YYYY-MM-DD` in their time zone when the call was made), so a month
is the sum of the days whose label starts with `YYYY-MM`; everyone's total is keyed by the UTC
date. Money is integer micro-dollars, so sums never drift.
"""

from __future__ import annotations

from vault.schema import Migration

LIMITS = Migration(
    "limits",
    (
        """CREATE TABLE spend_user_days (
            user INTEGER NOT NULL REFERENCES users(id),
            day TEXT NOT NULL,
            calls INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            usd_micros INTEGER NOT NULL DEFAULT 0,
            refusals INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (user, day)
        ) STRICT, WITHOUT ROWID""",
        "CREATE INDEX spend_user_days_day ON spend_user_days(day)",
        """CREATE TABLE spend_global_days (
            day TEXT PRIMARY KEY,
            calls INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            usd_micros INTEGER NOT NULL DEFAULT 0,
            refusals INTEGER NOT NULL DEFAULT 0
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE budget_notices (
            user INTEGER NOT NULL REFERENCES users(id),
            window TEXT NOT NULL,
            at_ms INTEGER NOT NULL,
            PRIMARY KEY (user, window)
        ) STRICT, WITHOUT ROWID""",
        "ALTER TABLE llm_calls ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE llm_calls ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0",
    ),
)
