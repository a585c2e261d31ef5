"""Schema for context subscriptions and the events they receive (`vault/subscriptions.py`).

A subscription is a row with its patterns and filters as JSON; its webhook secret is kept
because every delivery is signed with it (it is shown to its creator once and never listed).
An event is written BEFORE anyone is told about it: the poll cursor and the SSE `id` are its
`seq`, and a webhook delivery is the row's `delivery` state with its attempt count and the time
of its next attempt, so a restart resumes exactly where delivery stopped. Rows are soft-deleted
(`deleted_ms`) so events keep pointing at their subscription.
"""

from __future__ import annotations

from vault.schema import Migration

SUBSCRIPTIONS = Migration(
    "subscriptions",
    (
        """CREATE TABLE subscriptions (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            patterns TEXT NOT NULL CHECK (json_valid(patterns)),
            callback TEXT NOT NULL CHECK (callback IN ('webhook', 'sse', 'poll')),
            url TEXT,
            secret TEXT,
            min_relevance REAL NOT NULL,
            max_per_trigger INTEGER NOT NULL,
            cooldown_ms INTEGER NOT NULL,
            chats TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(chats)),
            users TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(users)),
            enabled INTEGER NOT NULL DEFAULT 1,
            disabled_reason TEXT,
            failures INTEGER NOT NULL DEFAULT 0,
            last_triggered_ms INTEGER,
            created_ms INTEGER NOT NULL,
            deleted_ms INTEGER
        ) STRICT""",
        """CREATE TABLE subscription_events (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            subscription TEXT NOT NULL REFERENCES subscriptions(id),
            chat TEXT NOT NULL DEFAULT '',
            payload TEXT NOT NULL CHECK (json_valid(payload)),
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'shown', 'used', 'dismissed')),
            delivery TEXT NOT NULL DEFAULT 'stored'
                CHECK (delivery IN ('stored', 'queued', 'delivered', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_ms INTEGER,
            created_ms INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX subscription_events_sub ON subscription_events(subscription, seq)",
        """CREATE INDEX subscription_events_due ON subscription_events(next_attempt_ms)
            WHERE delivery = 'queued'""",
    ),
)
