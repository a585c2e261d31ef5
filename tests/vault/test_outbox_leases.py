"""Outbox rows held by replicas sharing one PostgreSQL vault: a starting replica settles and
resends only rows no live replica holds; a dead replica's rows are taken over once its lease
has expired — the waiting ones sent once, in order, the interrupted ones `uncertain`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.core.clock import ManualClock
from gateway.core.errors import DeliveryTransient
from gateway.core.messages import ChatRef, Outbound
from gateway.turns.delivery import Delivery, DeliveryStatus
from tests.fakes import MemoryChannel
from vault.migrations import migrate
from vault.outbox import Outbox
from vault.pg.vault import PgVault

LEASE_MS = 30_000
CHAT = ChatRef(channel="memory", chat_id="c1")


def out(key: str, chat: ChatRef = CHAT) -> Outbound:
    return Outbound(chat=chat, text=f"text {key}", idempotency_key=key)


@asynccontextmanager
async def replica(url: str, name: str) -> AsyncIterator[Outbox]:
    async with PgVault(url) as vault:
        await migrate(vault)
        yield Outbox(vault, owner=name, lease_ms=LEASE_MS)


async def statuses(outbox: Outbox) -> dict[str, tuple[str, str | None]]:
    rows = await outbox.vault.fetchall("SELECT idempotency_key, status, owner FROM outbox")
    return {r[0]: (r[1], r[2]) for r in rows}


async def test_a_starting_replica_leaves_a_live_replicas_rows_alone(pg_url: str) -> None:
    now = 1_000_000
    async with replica(pg_url, "a") as a, replica(pg_url, "b") as b:
        sending, _ = await a.enqueue_in_order(out("k1"), now)
        behind, waits = await a.enqueue_in_order(out("k2"), now)
        assert waits and (sending.status, behind.status) == ("sending", "pending")
        # b starts while a is sending: nothing of a's is settled, resent or claimable.
        assert await b.recover_after_crash(now + 1) == 0
        assert await b.first_waiting(now_ms=now + 1) == []
        assert not await b.mark_sending(behind.id, now + 1)
        # a renews; past the first lease its rows are still its own.
        assert await a.renew(now + LEASE_MS - 1) == 2
        later = now + LEASE_MS + 1
        assert await b.recover_after_crash(later, at_start=False) == 0
        assert await b.first_waiting(now_ms=later) == []
        assert await statuses(b) == {"k1": ("sending", "a"), "k2": ("pending", "a")}


async def test_a_dead_replicas_rows_are_taken_over_after_its_lease(pg_url: str) -> None:
    now = 1_000_000
    async with replica(pg_url, "b") as b:
        async with replica(pg_url, "a") as a:
            await a.enqueue_in_order(out("k1"), now)  # `sending` when a dies
            behind, _ = await a.enqueue_in_order(out("k2"), now)
        expired = now + LEASE_MS
        # The send that may have happened is settled `uncertain`, never resent ...
        assert await b.recover_after_crash(expired, at_start=False) == 1
        # ... and the waiting row, first in its chat now, is b's to send.
        [waiting] = await b.first_waiting(now_ms=expired)
        assert waiting.row.id == behind.id
        assert await b.mark_sending(behind.id, expired)
        assert await statuses(b) == {"k1": ("uncertain", "a"), "k2": ("sending", "b")}
        # Its own row (after a restart under the same id) is settled at start, not kept.
        assert await b.recover_after_crash(expired + 1) == 1


async def test_a_dead_replicas_put_off_reply_is_sent_once_by_a_live_one(pg_url: str) -> None:
    clock = ManualClock(1_000_000)
    channel = MemoryChannel()
    async with replica(pg_url, "a") as a, replica(pg_url, "b") as b:
        first = Delivery(outbox=a, channels={"memory": channel}, clock=clock)
        second = Delivery(outbox=b, channels={"memory": channel}, clock=clock)
        await second.settle_interrupted()
        # a's send is told to come back in 10 minutes: the row waits, held by a.
        channel.fail_with.append(DeliveryTransient("slow down", retry_after_s=600))
        result = await first.deliver(out("k1"))
        assert result.status is DeliveryStatus.QUEUED
        clock.advance(601)  # due, but a is alive and renews: b leaves it
        await a.renew(clock.now_ms())
        assert await second.resend_pending() is None
        assert channel.sent == []
        clock.advance(LEASE_MS / 1000)  # a died (no renewal): b takes it over
        assert await second.resend_pending() is None
        assert [o.idempotency_key for o in channel.sent] == ["k1"]
        assert await first.resend_pending() is None  # a, had it lived on, finds nothing left
        assert len(channel.sent) == 1
        assert await statuses(b) == {"k1": ("sent", "b")}
