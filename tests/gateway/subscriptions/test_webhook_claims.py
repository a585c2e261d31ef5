"""Webhook senders of several replicas on one real PostgreSQL vault: due events are claimed
(`FOR UPDATE SKIP LOCKED`, owner + lease), so two senders racing each other POST every event
once; a dead replica's claimed event is sent by another once its lease has expired, with the
same idempotency key, and the dead replica's late outcome writes nothing over it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from gateway.core.clock import ManualClock
from gateway.subscriptions.settings import SubscriptionsSection
from gateway.subscriptions.webhook import Webhooks
from tests.fakes.clock import run_clock_until
from tests.gateway.subscriptions.helpers import Receiver, receiver
from vault.audit import AuditLog
from vault.migrations import migrate
from vault.pg.vault import PgVault
from vault.subscriptions import NewEvent, SubscriptionRow, SubscriptionStore
from vault.webhook_claims import WebhookClaims

LEASE_MS = 30_000
SECRET = "hook-secret"
SUB = "sub_replicas"


@asynccontextmanager
async def sender(url: str, name: str, clock: ManualClock) -> AsyncIterator[Webhooks]:
    """One replica's webhook job on its own connections to the shared database."""
    async with PgVault(url) as vault:
        await migrate(vault)
        store = SubscriptionStore(vault)
        yield Webhooks(
            store=store,
            claims=WebhookClaims(store, owner=name, lease_ms=LEASE_MS),
            settings=SubscriptionsSection(webhook_private_addresses=True),  # receivers on 127.0.0.1
            clock=clock,
            audit=AuditLog(vault),
        )


async def queue(store: SubscriptionStore, hook: Receiver, count: int, now_ms: int) -> list[str]:
    """A webhook subscription to `hook` with `count` queued events; their idempotency keys."""
    hook.secret = SECRET
    await store.create(
        SubscriptionRow(
            id=SUB, owner="admin", patterns=[], callback="webhook", url=hook.url, secret=SECRET,
            min_relevance=0.0, max_per_trigger=5, cooldown_ms=0, chats=[], users=[],
            enabled=True, disabled_reason=None, failures=0, last_triggered_ms=None,
            created_ms=now_ms,
        )
    )  # fmt: skip
    keys = [f"key-{n}" for n in range(count)]
    events = [NewEvent(id=f"evt_{k}", chat="memory:c1", payload={"idempotency_key": k})
              for k in keys]  # fmt: skip
    await store.add_events(SUB, events, webhook=True, now_ms=now_ms)
    return keys


async def deliveries(store: SubscriptionStore) -> set[tuple[str, str | None, int]]:
    rows = await store.vault.fetchall("SELECT delivery, owner, attempts FROM subscription_events")
    return {(r[0], r[1], r[2]) for r in rows}


async def test_two_senders_on_one_vault_post_each_event_once(pg_url: str) -> None:
    clock = ManualClock(1_000_000)
    async with (
        receiver() as hook,
        sender(pg_url, "a", clock) as a,
        sender(pg_url, "b", clock) as b,
        aiohttp.ClientSession() as http,
    ):
        keys = await queue(a.store, hook, 120, clock.now_ms())  # more than one claim's batch
        async with asyncio.TaskGroup() as tg:
            for webhooks in (a, b):
                tg.create_task(webhooks.deliver_due(http))
        got = [g["key"] for g in hook.got]
        assert sorted(got) == sorted(keys)  # every event, none twice
        assert all(g["verified"] for g in hook.got)
        assert a.delivered + b.delivered == len(keys)
        assert await deliveries(a.store) == {("delivered", None, 1)}


async def test_a_dead_replicas_event_is_sent_by_another_after_its_lease(pg_url: str) -> None:
    clock = ManualClock(1_000_000)
    async with receiver() as hook, sender(pg_url, "b", clock) as b:
        async with sender(pg_url, "a", clock) as a:
            [key] = await queue(a.store, hook, 1, clock.now_ms())
            start = clock.now_ms()
            [(event, sub)] = await a.claims.claim(start, 50)  # a is POSTing it ...
            # ... so b leaves it alone, and next looks when a's lease ends.
            assert await b.claims.claim(start + 1, 50) == []
            assert await b.claims.next_due_ms() == start + LEASE_MS
            assert await a.claims.renew(start + LEASE_MS - 1) == 1  # a lives on: still a's
            assert await b.claims.claim(start + LEASE_MS, 50) == []
        # a died mid-send (no outcome written, no renewal): b's job, waiting for the lease's
        # end on its clock, sends the event then.
        async with asyncio.TaskGroup() as tg:
            job = tg.create_task(b.run())
            await run_clock_until(clock, lambda: b.delivered == 1)
            job.cancel()
        assert clock.now_ms() >= start + 2 * LEASE_MS - 1  # not before a's renewed lease ended
        assert [(g["key"], g["verified"]) for g in hook.got] == [(key, True)]
        assert await deliveries(b.store) == {("delivered", None, 1)}
        # a's outcome, had it come back late, changes nothing: no retry, no failure counted.
        assert not await b.store.failed(
            event.seq, sub.id, retry_at_ms=clock.now_ms(), max_failures=1, reason="late",
            holder="a",
        )  # fmt: skip
        assert not await b.store.delivered(event.seq, sub.id, holder="a")
        assert await deliveries(b.store) == {("delivered", None, 1)}
        found = await b.store.get(SUB)
        assert found is not None and (found.enabled, found.failures) == (True, 0)
