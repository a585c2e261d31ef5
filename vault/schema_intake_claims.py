"""Schema of the per-chat claims on the intake (`vault/intake_claims.py`): which replica runs
a chat's saved inbound messages now, and until when its lease holds.

Used only on PostgreSQL, where several replicas share the intake; on SQLite the table stays
empty (one process runs every chat). The partial index serves the holder's "oldest pending
message of this chat" and the scan for chats nobody holds.
"""

from __future__ import annotations

from vault.schema import Migration

INTAKE_CLAIMS = Migration(
    "intake_claims",
    (
        """CREATE TABLE intake_claims (
            chat_key TEXT PRIMARY KEY,
            replica TEXT NOT NULL,
            lease_until INTEGER NOT NULL,
            claimed_ms INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID""",
        "CREATE INDEX intake_chat_pending ON intake (chat_key, id) WHERE state = 'pending'",
    ),
)
