"""Schema for replicas sharing the webhook queue (`vault/webhook_claims.py`): who is POSTing a
subscription event, and until when.

A replica that picks due events stamps them with its id (`owner`) and a lease
(`lease_until`) it renews while the POSTs are under way; the other replicas skip a held event
until its lease has expired (its holder died), then deliver it themselves. A settled attempt
(delivered, rescheduled or given up) clears both, so whichever replica is free takes the next
retry. On SQLite there is one process, and both columns stay NULL.
"""

from __future__ import annotations

from vault.schema import Migration

WEBHOOK_LEASES = Migration(
    "webhook_leases",
    (
        "ALTER TABLE subscription_events ADD COLUMN owner TEXT",
        "ALTER TABLE subscription_events ADD COLUMN lease_until INTEGER",
        """CREATE INDEX subscription_events_owner ON subscription_events (owner)
            WHERE delivery = 'queued' AND owner IS NOT NULL""",
    ),
)
