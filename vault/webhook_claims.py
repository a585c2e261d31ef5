"""Which webhook deliveries are due, and which replica POSTs each (schema in
`vault/schema_webhook_leases.py`).

One process (SQLite, no `owner`): the due events are read as they are; their attempt settles
each before the next read. Replicas sharing a PostgreSQL vault (an `owner`): picking due events
is a claim — one UPDATE stamps them with this replica's id and a lease, its inner SELECT
locking the rows it picks and skipping those another replica's claim is locking (`FOR UPDATE
SKIP LOCKED`), and held rows are skipped until their lease has expired. So two replicas never
POST one event at once; the holder renews its lease while the POSTs are under way, and if it
dies, the event is due again once the lease runs out and another replica sends it — with the
same idempotency key, since the first POST may have arrived. Settling an attempt
(`SubscriptionStore.delivered` / `failed`, given the holder) clears the lease, and changes
nothing if the row is no longer this replica's (its lease expired and another took it over).
"""

from __future__ import annotations

import sqlite3

from vault.db import Vault
from vault.proactive.tx import SKIP_LOCKED
from vault.subscriptions import EventRow, SubscriptionRow, SubscriptionStore, _event

_EVENT = "seq, id, subscription, chat, payload, status, delivery, attempts"
_DUE = """e.delivery = 'queued' AND e.next_attempt_ms <= ? AND EXISTS (
    SELECT 1 FROM subscriptions AS s WHERE s.id = e.subscription AND s.enabled = 1)"""


class WebhookClaims:
    def __init__(self, store: SubscriptionStore, *, owner: str | None, lease_ms: int) -> None:
        """`owner`: this replica's id when replicas share the vault (events are leased to it
        for `lease_ms`, renewed by `renew`); None: this process is the only one."""
        self.store = store
        self.owner = owner
        self.lease_ms = lease_ms

    @property
    def vault(self) -> Vault:
        return self.store.vault

    async def claim(self, now_ms: int, limit: int) -> list[tuple[EventRow, SubscriptionRow]]:
        """Up to `limit` due events of enabled subscriptions, soonest due first; with an
        owner, leased to it and none that another live replica holds."""
        if self.owner is None:
            rows = await self.vault.fetchall(
                f"""SELECT {", ".join(f"e.{c}" for c in _EVENT.split(", "))}
                    FROM subscription_events AS e WHERE {_DUE}
                    ORDER BY e.next_attempt_ms, e.seq LIMIT ?""",
                (now_ms, limit),
            )
        else:
            owner, until, lock = self.owner, now_ms + self.lease_ms, SKIP_LOCKED[self.vault.dialect]

            def body(raw: sqlite3.Connection) -> list[sqlite3.Row]:
                return raw.execute(
                    f"""UPDATE subscription_events SET owner = ?, lease_until = ?
                        WHERE seq IN (SELECT e.seq FROM subscription_events AS e
                            WHERE {_DUE} AND (e.lease_until IS NULL OR e.lease_until <= ?)
                            ORDER BY e.next_attempt_ms, e.seq LIMIT ?{lock})
                        RETURNING {_EVENT}, next_attempt_ms""",
                    (owner, until, now_ms, now_ms, limit),
                ).fetchall()  # every RETURNING row is fetched before COMMIT

            returned = await self.vault.run(body)
            rows = sorted(returned, key=lambda r: (r["next_attempt_ms"], r["seq"]))
        found = []
        for r in rows:
            sub = await self.store.get(r["subscription"])
            if sub is not None:
                found.append((_event(r), sub))
        return found

    async def renew(self, now_ms: int) -> int:
        """Extend this replica's hold on the events it is POSTing; how many. (No owner:
        nothing to do.)"""
        if self.owner is None:
            return 0
        return await self.vault.write_rowcount(
            """UPDATE subscription_events SET lease_until = ?
               WHERE owner = ? AND delivery = 'queued'""",
            (now_ms + self.lease_ms, self.owner),
        )

    async def next_due_ms(self) -> int | None:
        """When the next event is due: its next attempt, or later the end of the lease of a
        replica holding it (this replica's own are settled before it asks)."""
        found = await self.vault.scalar(
            """SELECT min(CASE WHEN e.lease_until > e.next_attempt_ms THEN e.lease_until
                               ELSE e.next_attempt_ms END)
               FROM subscription_events AS e JOIN subscriptions AS s ON s.id = e.subscription
               WHERE e.delivery = 'queued' AND s.enabled = 1"""
        )
        return None if found is None else int(found)
