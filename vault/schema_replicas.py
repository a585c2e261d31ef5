"""Schema of the replicas' heartbeats (`vault/replicas.py`): one row per `iris run` process
sharing the vault, rewritten every few seconds while it runs."""

from __future__ import annotations

from vault.schema import Migration

REPLICAS = Migration(
    "replicas",
    (
        """CREATE TABLE replicas (
            id TEXT PRIMARY KEY,
            started_ms INTEGER NOT NULL,
            last_seen_ms INTEGER NOT NULL,
            leaderships TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(leaderships)),
            counters TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(counters))
        ) STRICT""",
        "CREATE INDEX replicas_seen ON replicas (last_seen_ms)",
    ),
)
