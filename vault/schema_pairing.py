"""Schema of access granted in chat (`vault/pairing.py`): grants and pending pairing codes.

`access_grants` holds one decision per platform user, made by an admin with `/admin allow` or
`/admin deny`; `pairing_codes` the short code a stranger was given in their not-authorized
notice, one live code per user.
"""

from __future__ import annotations

from vault.schema import Migration

PAIRING = Migration(
    "pairing",
    (
        """CREATE TABLE access_grants (
            channel TEXT NOT NULL,
            user_id TEXT NOT NULL,
            access TEXT NOT NULL CHECK (access IN ('allow', 'deny')),
            actor TEXT NOT NULL,
            at_ms INTEGER NOT NULL,
            PRIMARY KEY (channel, user_id)
        ) STRICT""",
        """CREATE TABLE pairing_codes (
            code TEXT PRIMARY KEY,
            channel TEXT NOT NULL,
            user_id TEXT NOT NULL,
            display_name TEXT NOT NULL DEFAULT '',
            created_ms INTEGER NOT NULL,
            expires_ms INTEGER NOT NULL,
            UNIQUE (channel, user_id)
        ) STRICT""",
    ),
)
