from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.core.clock import ManualClock
from gateway.core.errors import (
    ChatUnreachable,
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
)
from gateway.core.messages import ChatRef, Outbound, OutboundKind
from gateway.turns.delivery import Delivery
from tests.fakes import MemoryChannel, run_clock_until
from vault.db import Vault
from vault.migrations import migrate
from vault.outbox import Outbox

CHAT = ChatRef(channel="memory", chat_id="c1")


def out(key: str = "k1", text: str = "hello") -> Outbound:
    return Outbound(chat=CHAT, text=text, idempotency_key=key)


@pytest.fixture
async def outbox(tmp_path: Path) -> AsyncIterator[Outbox]:
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        yield Outbox(vault)


def delivery(outbox: Outbox, channel: MemoryChannel, clock: ManualClock, **kw: object) -> Delivery:
    return Delivery(
        outbox=outbox, channels={"memory": channel}, clock=clock, backoff_base_s=1.0, **kw
    )  # type: ignore[arg-type]


async def settle(clock: ManualClock, task: asyncio.Task[object]) -> None:
    """Advance the manual clock whenever the delivery sleeps, until it finishes."""
    await run_clock_until(clock, task.done)


async def test_transient_failures_retry_with_backoff_and_retry_after(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend([DeliveryTransient("429", retry_after_s=7), DeliveryTransient("net")])
    start = clock.now_ms()
    task = asyncio.create_task(delivery(outbox, channel, clock).deliver(out()))
    await settle(clock, task)
    result = task.result()
    assert result.status == "sent" and channel.texts() == ["hello"]
    assert clock.now_ms() - start == 7_000 + 2_000  # Retry-After, then base * 2**1
    assert await outbox.status(result.outbox_id) == "sent"


async def test_gives_up_after_max_attempts(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend(DeliveryTransient("down") for _ in range(10))
    task = asyncio.create_task(delivery(outbox, channel, clock, max_attempts=3).deliver(out()))
    await settle(clock, task)
    assert task.result().status == "failed"
    assert len(channel.fail_with) == 7


async def test_permanent_unreachable_and_uncertain(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    unreachable: list[ChatRef] = []

    async def note(chat: ChatRef) -> None:
        unreachable.append(chat)

    d = delivery(outbox, channel, clock, on_unreachable=note)
    channel.fail_with.extend(
        [DeliveryPermanent("bad"), ChatUnreachable("blocked"), DeliveryUncertain("timeout")]
    )
    assert (await d.deliver(out("a"))).status == "failed"
    assert (await d.deliver(out("b"))).status == "failed"
    assert unreachable == [CHAT]
    assert (await d.deliver(out("c"))).status == "uncertain"
    assert channel.sent == []


async def test_same_idempotency_key_is_sent_once(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    d = delivery(outbox, channel, clock)
    assert (await d.deliver(out("same"))).status == "sent"
    assert (await d.deliver(out("same"))).status == "duplicate"
    assert channel.texts() == ["hello"]


async def test_unexpected_exception_is_uncertain_and_raised_as_ours(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.append(RuntimeError("sdk bug"))
    with pytest.raises(DeliveryUncertain):
        await delivery(outbox, channel, clock).deliver(out())
    assert await outbox.counts() == {"uncertain": 1}


async def test_recovery_after_a_crash(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    crashed = await outbox.enqueue(out("mid-send"), clock.now_ms(), status="sending")
    waiting = await outbox.enqueue(out("never-tried", "later"), clock.now_ms())
    await delivery(outbox, channel, clock).recover()
    assert await outbox.status(crashed.id) == "uncertain"  # never resent
    assert await outbox.status(waiting.id) == "sent"
    assert channel.texts() == ["later"]


async def test_no_channel_for_the_message_fails_visibly(outbox: Outbox) -> None:
    d = Delivery(outbox=outbox, channels={}, clock=ManualClock())
    result = await d.deliver(
        Outbound(chat=CHAT, text="x", idempotency_key="k", kind=OutboundKind.PROACTIVE)
    )
    assert result.status == "failed"


async def test_resend_after_restart_goes_on_past_a_failing_row(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    first = await outbox.enqueue(out("a", "first"), clock.now_ms())
    second = await outbox.enqueue(out("b", "second"), clock.now_ms())
    channel.fail_with.append(RuntimeError("sdk bug"))  # the first row's send blows up
    await delivery(outbox, channel, clock).resend_pending()
    assert await outbox.status(first.id) == "uncertain"
    assert await outbox.status(second.id) == "sent"
    assert channel.texts() == ["second"]
