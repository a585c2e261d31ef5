"""Schema of the durable intake (`vault/intake.py`): raw inbound messages saved before the
platform is told they arrived, until their turn ends."""

from __future__ import annotations

from vault.schema import Migration

INTAKE = Migration(
    "intake",
    (
        """CREATE TABLE intake (
            id INTEGER PRIMARY KEY,
            channel TEXT NOT NULL,
            key TEXT NOT NULL UNIQUE,
            chat_key TEXT NOT NULL,
            payload TEXT NOT NULL,
            received_ms INTEGER NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'rejected')),
            reason TEXT NOT NULL DEFAULT ''
        ) STRICT""",
        "CREATE INDEX intake_pending ON intake (id) WHERE state = 'pending'",
    ),
)
