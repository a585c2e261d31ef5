"""Schema for inline context suggestions (`vault/suggestions.py`).

`suggestions` keeps every item offered in a chat with its lifecycle (`pending` while its block
is being sent, then `shown`, then `used` or `dismissed`): the per-chat item cooldown, the chat
cooldown, the Use/Dismiss feedback and the per-type acceptance all read it. `block` groups the
items shown together and `ordinal` is the number the user types (`/use 2`). `applied_ms` is set
when a used item went into a model request, so it goes in exactly once.
`suggestions_off` holds who switched suggestions off: a user (everywhere) or a chat (by an
admin).
"""

from __future__ import annotations

from vault.schema import Migration

SUGGESTIONS = Migration(
    "suggestions",
    (
        """CREATE TABLE suggestions (
            id INTEGER PRIMARY KEY,
            chat INTEGER NOT NULL REFERENCES chats(id),
            user INTEGER NOT NULL REFERENCES users(id),
            block INTEGER NOT NULL,
            ordinal INTEGER NOT NULL,
            item_key TEXT NOT NULL,
            type TEXT NOT NULL CHECK (
                type IN ('decision', 'change', 'doc', 'memory', 'followup', 'warning')
            ),
            title TEXT NOT NULL,
            summary TEXT NOT NULL,
            content TEXT NOT NULL,
            relevance REAL NOT NULL CHECK (relevance BETWEEN 0 AND 1),
            reason TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'shown', 'used', 'dismissed')),
            created_ms INTEGER NOT NULL,
            shown_ms INTEGER,
            decided_ms INTEGER,
            applied_ms INTEGER
        ) STRICT""",
        "CREATE INDEX suggestions_chat_item ON suggestions(chat, item_key, created_ms)",
        "CREATE INDEX suggestions_chat_block ON suggestions(chat, block, ordinal)",
        "CREATE INDEX suggestions_created ON suggestions(created_ms)",
        """CREATE TABLE suggestions_off (
            kind TEXT NOT NULL CHECK (kind IN ('user', 'chat')),
            ref INTEGER NOT NULL,
            changed_ms INTEGER NOT NULL,
            PRIMARY KEY (kind, ref)
        ) STRICT""",
    ),
)
