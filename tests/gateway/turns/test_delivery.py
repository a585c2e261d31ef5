"""Delivery on a MemoryChannel with scripted failures and a manual clock (no sleeps): retries,
outcomes, the background resend of rows a long wait left behind, order per chat, exactly once,
and what it reports (logs, metrics, health)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.core.clock import ManualClock
from gateway.core.errors import (
    ChatUnreachable,
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
)
from gateway.core.messages import ChatRef, Outbound, OutboundKind, SentReceipt
from gateway.turns.delivery import ORPHAN_AFTER_MS, Delivery
from gateway.turns.delivery_health import LAPSE_S
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound, run_clock_until
from vault.batch import SyncBody
from vault.db import Vault
from vault.migrations import migrate
from vault.outbox import Outbox

CHAT = ChatRef(channel="memory", chat_id="c1")
OTHER = ChatRef(channel="memory", chat_id="c2")
LONG = 600.0  # a Retry-After far beyond the inline bound


def out(key: str = "k1", text: str = "hello", chat: ChatRef = CHAT) -> Outbound:
    return Outbound(chat=chat, text=text, idempotency_key=key)


@pytest.fixture
async def outbox(tmp_path: Path) -> AsyncIterator[Outbox]:
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        yield Outbox(vault)


def delivery(outbox: Outbox, channel: MemoryChannel, clock: ManualClock, **kw: object) -> Delivery:
    settings: dict[str, object] = {"backoff_base_s": 1.0, **kw}
    return Delivery(outbox=outbox, channels={"memory": channel}, clock=clock, **settings)  # type: ignore[arg-type]


async def settle(clock: ManualClock, task: asyncio.Task[object]) -> None:
    """Advance the manual clock whenever the delivery sleeps, until it finishes."""
    await run_clock_until(clock, task.done)


class SignallingClock(ManualClock):
    def __init__(self) -> None:
        super().__init__()
        self.slept = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.slept.set()
        await super().sleep(seconds)


async def run_clock_until_true(clock: ManualClock, check: Callable[[], Awaitable[bool]]) -> None:
    """`run_clock_until` for a condition that must be read from the vault."""

    async def loop() -> None:
        while not await check():
            wake = clock.next_wakeup_ms()
            if wake is not None:
                clock.set(wake)

    await asyncio.wait_for(loop(), 5)


def settled(outbox: Outbox, *row_ids: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        statuses = [await outbox.status(i) for i in row_ids]
        return all(status in ("sent", "failed", "uncertain") for status in statuses)

    return check


@pytest.fixture
async def resender() -> AsyncIterator[list[asyncio.Task[None]]]:
    """Background resend tasks a test starts; cancelled at the end."""
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)


async def test_short_waits_are_retried_in_place(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend([DeliveryTransient("429", retry_after_s=2), DeliveryTransient("net")])
    start = clock.now_ms()
    task = asyncio.create_task(delivery(outbox, channel, clock).deliver(out()))
    await settle(clock, task)
    result = task.result()
    assert result.status == "sent" and channel.texts() == ["hello"]
    assert clock.now_ms() - start == 2_000 + 2_000  # Retry-After, then base * 2**1
    assert await outbox.status(result.outbox_id) == "sent"


async def test_gives_up_after_max_attempts(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend(DeliveryTransient("down") for _ in range(10))
    d = delivery(outbox, channel, clock, max_attempts=3, backoff_base_s=0.0, give_up_after_s=0)
    result = await d.deliver(out())
    assert result.status == "failed"
    assert len(channel.fail_with) == 7
    assert "gave up after 3 attempts" in d.health.problems()["memory"].reason


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
    assert d.health.problems() == {}  # one refused message says nothing about the channel
    assert (await d.deliver(out("c"))).status == "uncertain"
    assert channel.sent == []
    assert "uncertain" in d.health.problems()["memory"].reason


async def test_an_uncertain_send_with_nothing_waiting_is_shown_for_a_while_only(
    outbox: Outbox,
) -> None:
    """After an uncertain send a quiet bot kept failing its health checks (503) for hours,
    until somebody happened to write; a put-off message, still waiting, stays shown."""
    channel, clock = MemoryChannel(), ManualClock()
    d = delivery(outbox, channel, clock, max_inline_wait_s=0)
    channel.fail_with.append(DeliveryUncertain("HTTP 500"))
    assert (await d.deliver(out("a"))).status == "uncertain"
    clock.advance(LAPSE_S - 1)
    assert "uncertain" in d.health.problems()["memory"].reason
    clock.advance(1)
    assert d.health.problems() == {}
    assert await d.health.gauge() == {("memory",): 1.0}
    channel.fail_with.append(DeliveryTransient("429", retry_after_s=LONG))
    assert (await d.deliver(out("b", chat=OTHER))).status == "queued"
    channel.fail_with.append(DeliveryUncertain("HTTP 500"))  # another chat's send, meanwhile
    assert (await d.deliver(out("c"))).status == "uncertain"
    clock.advance(LAPSE_S * 4)
    assert "uncertain" in d.health.problems()["memory"].reason  # "b" still waits


async def test_same_idempotency_key_is_sent_once(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    d = delivery(outbox, channel, clock)
    assert (await d.deliver(out("same"))).status == "sent"
    assert (await d.deliver(out("same"))).status == "duplicate"
    assert channel.texts() == ["hello"]


async def test_unexpected_exception_is_uncertain_and_logged_with_one_traceback(
    outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend([RuntimeError("sdk bug"), RuntimeError("sdk bug")])
    d = delivery(outbox, channel, clock)
    with caplog.at_level(logging.WARNING, logger="gateway.turns.delivery"):
        assert (await d.deliver(out("a"))).status == "uncertain"
        assert (await d.deliver(out("b"))).status == "uncertain"
    assert await outbox.counts() == {"uncertain": 2}
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1  # the first of a kind; later ones are one line each


async def test_each_uncertain_or_failed_send_is_logged_once_in_one_line(
    outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend([DeliveryUncertain("read timeout"), DeliveryPermanent("too long")])
    d = delivery(outbox, channel, clock)
    with caplog.at_level(logging.INFO, logger="gateway.turns.delivery"):
        first = await d.deliver(out("a"))
        second = await d.deliver(out("b"))
    for result in (first, second):
        lines = [r for r in caplog.records if f"outbox #{result.outbox_id} " in r.getMessage()]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert lines[0].exc_info is None and "\n" not in lines[0].getMessage()


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
    second = await outbox.enqueue(out("b", "second", chat=OTHER), clock.now_ms())
    channel.fail_with.append(RuntimeError("sdk bug"))  # the first row's send blows up
    await delivery(outbox, channel, clock).recover()
    assert await outbox.status(first.id) == "uncertain"
    assert await outbox.status(second.id) == "sent"
    assert channel.texts() == ["second"]


# --- a long wait leaves the caller; the background resend sends it, in order --------------


async def test_a_long_retry_after_leaves_the_caller_at_once(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.append(DeliveryTransient("429", retry_after_s=LONG))
    d = delivery(outbox, channel, clock)
    start = clock.now_ms()
    result = await d.deliver(out())  # returns without the clock moving: nothing waited
    assert result.status == "queued" and clock.now_ms() == start
    assert await outbox.status(result.outbox_id) == "pending"
    (waiting,) = await outbox.first_waiting()
    assert waiting.next_attempt_ms == start + int(LONG * 1000)
    assert "next attempt in 600 s" in d.health.problems()["memory"].reason
    assert d.metrics.delivery_deferred.values == {("memory", "retry_after"): 1}


async def test_the_inline_bound_counts_every_wait_of_one_delivery(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend(DeliveryTransient("net") for _ in range(3))  # 1 s, 2 s, then 4 s
    d = delivery(outbox, channel, clock, max_inline_wait_s=5.0)
    task = asyncio.create_task(d.deliver(out()))
    await settle(clock, task)
    assert task.result().status == "queued"
    assert d.metrics.delivery_deferred.values == {("memory", "backoff"): 1}


async def test_the_resend_sends_each_chat_in_order_when_due(
    outbox: Outbox, resender: list[asyncio.Task[None]]
) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.append(DeliveryTransient("429", retry_after_s=LONG))
    d = delivery(outbox, channel, clock)
    sent_hooks: list[str] = []

    def hook(name: str) -> SyncBody[None]:
        def body(raw: sqlite3.Connection) -> None:
            sent_hooks.append(name)

        return body

    first = await d.deliver(out("1", "first"), on_sent=hook("first"))
    second = await d.deliver(out("2", "second"), on_sent=hook("second"))
    elsewhere = await d.deliver(out("3", "elsewhere", chat=OTHER))
    assert (first.status, second.status, elsewhere.status) == ("queued", "queued", "sent")
    assert channel.texts() == ["elsewhere"]  # another chat is not held up

    resender.append(asyncio.create_task(d.run()))
    await run_clock_until(clock, lambda: len(sent_hooks) == 2)  # run inside `sent`'s commit
    # ... which the hook ran before: wait for the commit and the delivery's bookkeeping.
    await run_clock_until_true(clock, settled(outbox, first.outbox_id, second.outbox_id))
    async with asyncio.timeout(5):  # delivered again: the put-off mark cleared
        await run_clock_until(clock, lambda: not d.health.problems())
    assert channel.texts() == ["elsewhere", "first", "second"]
    assert sent_hooks == ["first", "second"]  # what the callers asked to commit with `sent`
    assert await outbox.counts() == {"sent": 3}


async def test_a_resend_that_is_uncertain_stays_uncertain(
    outbox: Outbox, resender: list[asyncio.Task[None]]
) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend(
        [DeliveryTransient("429", retry_after_s=LONG), DeliveryUncertain("reset after sending")]
    )
    d = delivery(outbox, channel, clock)
    first = await d.deliver(out("1", "first"))
    second = await d.deliver(out("2", "second"))
    resender.append(asyncio.create_task(d.run()))
    await run_clock_until_true(clock, settled(outbox, first.outbox_id, second.outbox_id))
    assert await outbox.status(first.outbox_id) == "uncertain"  # never tried again
    assert await outbox.status(second.outbox_id) == "sent"  # the chat goes on after it
    assert channel.texts() == ["second"]


async def test_a_resend_that_fails_again_waits_again_then_gives_up(
    outbox: Outbox, resender: list[asyncio.Task[None]]
) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend(DeliveryTransient("429", retry_after_s=LONG) for _ in range(3))
    d = delivery(outbox, channel, clock, max_attempts=3, give_up_after_s=LONG)
    result = await d.deliver(out())
    resender.append(asyncio.create_task(d.run()))
    start = clock.now_ms()
    await run_clock_until_true(clock, settled(outbox, result.outbox_id))
    assert await outbox.status(result.outbox_id) == "failed"
    assert clock.now_ms() - start == 2 * int(LONG * 1000)  # two resends, each when due
    assert channel.sent == []


async def test_a_platform_outage_of_minutes_loses_no_reply(
    outbox: Outbox, resender: list[asyncio.Task[None]]
) -> None:
    """The Bot API refused connections for 15 s: a reply gave up after its 5 attempts and
    never went out. Past `max_attempts` a reply keeps being retried (every `backoff_max_s`)
    until it is `give_up_after_s` old."""
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend(DeliveryTransient("not sent (ConnectError)") for _ in range(12))
    d = delivery(outbox, channel, clock, max_attempts=5, backoff_max_s=60, give_up_after_s=3600,
                 max_inline_wait_s=0)  # fmt: skip
    result = await d.deliver(out())
    assert result.status == "queued"
    resender.append(asyncio.create_task(d.run()))
    await run_clock_until_true(clock, settled(outbox, result.outbox_id))
    assert await outbox.status(result.outbox_id) == "sent" and channel.texts() == ["hello"]
    assert not channel.fail_with  # sent on the 13th attempt, some 8 minutes in
    late = out("k2", "later")
    channel.fail_with.extend(DeliveryTransient("not sent (ConnectError)") for _ in range(200))
    second = await d.deliver(late)
    await run_clock_until_true(clock, settled(outbox, second.outbox_id))
    assert await outbox.status(second.outbox_id) == "failed"  # an hour on: given up
    assert "gave up after" in d.health.problems()["memory"].reason


async def test_late_retries_never_spin_whatever_the_backoff_settings(
    outbox: Outbox, resender: list[asyncio.Task[None]]
) -> None:
    """Past `max_attempts` with no backoff (0 s settings, a Retry-After of 0), one deliver()
    made 500 attempts without the clock moving."""
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.extend(DeliveryTransient("down", retry_after_s=0) for _ in range(30))
    d = delivery(outbox, channel, clock, max_attempts=3, backoff_base_s=0.0, backoff_max_s=0.0,
                 give_up_after_s=3600, max_inline_wait_s=0)  # fmt: skip
    start = clock.now_ms()
    result = await d.deliver(out())
    assert result.status == "queued" and len(channel.fail_with) == 27  # 3, then it waits
    resender.append(asyncio.create_task(d.run()))
    await run_clock_until_true(clock, settled(outbox, result.outbox_id))
    assert channel.texts() == ["hello"]
    assert clock.now_ms() - start >= 27 * 1000  # each late retry a second apart at least


async def test_a_row_an_attempt_holds_is_never_resent_beside_it(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), SignallingClock()
    channel.fail_with.append(DeliveryTransient("429", retry_after_s=2))
    d = delivery(outbox, channel, clock)
    task = asyncio.create_task(d.deliver(out()))
    await asyncio.wait_for(clock.slept.wait(), 5)  # the attempt now waits in place for 2 s
    clock.advance(2)  # due now: both the waiting attempt and a resend pass could take it
    await d.resend_pending()
    assert (await task).status == "sent"
    assert channel.texts() == ["hello"]  # once


class HangingChannel(MemoryChannel):
    """Its first send never returns (until cancelled)."""

    def __init__(self) -> None:
        super().__init__()
        self.hanging = asyncio.Event()

    async def send(self, out: Outbound) -> SentReceipt:
        if not self.hanging.is_set():
            self.hanging.set()
            await asyncio.Event().wait()
        return await super().send(out)


async def test_a_send_cut_off_by_cancellation_is_uncertain_and_holds_up_nothing(
    outbox: Outbox,
) -> None:
    channel, clock = HangingChannel(), ManualClock()
    d = delivery(outbox, channel, clock)
    task = asyncio.create_task(d.deliver(out("cut", "cut off")))
    await asyncio.wait_for(channel.hanging.wait(), 5)
    task.cancel()
    await asyncio.wait([task])
    await outbox.vault.idle()
    assert await outbox.counts() == {"uncertain": 1}  # it may have gone out
    assert (await d.deliver(out("next", "next one"))).status == "sent"  # not queued behind it
    assert channel.texts() == ["next one"]


async def test_a_pending_row_another_component_writes_is_left_to_it(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    d = delivery(outbox, channel, clock)
    await d.settle_interrupted()  # start-up: rows written before this are leftovers
    fresh = await outbox.enqueue(out("proactive:1", "reminder"), clock.now_ms())
    assert await d.resend_pending() == clock.now_ms() + ORPHAN_AFTER_MS  # not taken yet
    assert channel.sent == []
    assert (await d.deliver_pending(fresh.id, fresh.outbound)).status == "sent"
    assert channel.texts() == ["reminder"]


async def test_proactive_sends_keep_waiting_in_place(outbox: Outbox) -> None:
    """`deliver_pending`'s caller records the item's outcome: it never gets `queued`."""
    channel, clock = MemoryChannel(), ManualClock()
    channel.fail_with.append(DeliveryTransient("429", retry_after_s=LONG))
    d = delivery(outbox, channel, clock)
    row = await outbox.enqueue(out("proactive:2", "later"), clock.now_ms())
    task = asyncio.create_task(d.deliver_pending(row.id, row.outbound))
    await settle(clock, task)
    assert task.result().status == "sent"


async def test_attempts_are_counted_by_result(outbox: Outbox) -> None:
    channel, clock = MemoryChannel(), ManualClock()
    d = delivery(outbox, channel, clock, backoff_base_s=0.0)
    channel.fail_with.append(DeliveryTransient("no connection"))
    await d.deliver(out("a"))
    channel.fail_with.append(DeliveryUncertain("reset"))
    await d.deliver(out("b"))
    assert d.metrics.delivery_attempts.values == {
        ("memory", "transient"): 1,
        ("memory", "sent"): 1,
        ("memory", "uncertain"): 1,
    }
    rendered = await d.metrics.render()
    assert 'iris_delivery_ok{channel="memory"} 0' in rendered


# --- through the app: a long Retry-After freezes neither the chat nor the gateway ----------


async def test_rate_limited_replies_hold_no_chat_and_no_router_slot(tmp_path: Path) -> None:
    config = make_config(tmp_path, router={"max_concurrency": 2})
    channel, llm, clock = MemoryChannel(), FakeLLM(), ManualClock()
    async with app_with(config, channel, llm, clock) as app:
        # Three chats' replies are rate limited for ten minutes: more than the router's slots.
        channel.fail_with.extend(DeliveryTransient("429", retry_after_s=LONG) for _ in range(3))
        to_a = [inbound("hi from a", chat="a"), inbound("a again", chat="a")]
        for message in (to_a[0], inbound("hi from b", chat="b"), inbound("hi from c", chat="c")):
            await app.router.submit(message)
        # The same chat and a new one are still answered at once, with no time passing.
        await app.router.submit(to_a[1])  # its reply waits behind a's first
        await app.router.submit(inbound("hello", chat="d"))
        assert len(channel.sent) == 1 and channel.sent[0].chat.chat_id == "d"
        saved = await app.vault.fetchall("SELECT text FROM messages WHERE role = 'user'")
        assert len(saved) == 5

        async def all_sent() -> bool:
            return await app.outbox.counts() == {"sent": 5}

        resend = asyncio.create_task(app.delivery.run())
        try:
            await run_clock_until_true(clock, all_sent)
        finally:
            resend.cancel()
            await asyncio.wait([resend])
        answered = [o.reply_to for o in channel.sent if o.chat.chat_id == "a"]
        assert answered == [m.message_id for m in to_a]  # in order within the chat
        replies = await app.vault.fetchall("SELECT text FROM messages WHERE role = 'assistant'")
        assert len(replies) == 5  # each entered the history once (when queued, or sent)


async def test_a_reply_held_by_a_rate_limit_is_in_the_next_turns_history(tmp_path: Path) -> None:
    """The next message is answered before the held reply goes out: its turn must see that
    the first question was answered (else a model answers it again), in the right order."""
    channel, llm, clock = MemoryChannel(), FakeLLM(), ManualClock()
    async with app_with(make_config(tmp_path), channel, llm, clock) as app:
        channel.fail_with.append(DeliveryTransient("429", retry_after_s=LONG))
        llm.enqueue_text("answer one").enqueue_text("answer two").enqueue_text("answer three")
        await app.router.submit(inbound("question one"))
        await app.router.submit(inbound("question two"))  # queued behind the held reply
        await app.router.submit(inbound("question three"))
        assert channel.sent == []
        turns = [
            [(m.role, " ".join(p.text for p in m.parts if hasattr(p, "text"))) for m in r.messages]
            for r in llm.requests
        ]
        assert turns[2] == [
            ("user", "question one"),
            ("assistant", "answer one"),
            ("user", "question two"),
            ("assistant", "answer two"),
            ("user", "question three"),
        ]
        saved = await app.vault.fetchall("SELECT role, text FROM messages ORDER BY id")
        assert [tuple(r) for r in saved] == [
            ("user", "question one"), ("assistant", "answer one"),
            ("user", "question two"), ("assistant", "answer two"),
            ("user", "question three"), ("assistant", "answer three"),
        ]  # fmt: skip
