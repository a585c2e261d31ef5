"""A reply joins the session history when it was, or may have been, delivered — also when its
send is settled by a later process: after a crash (the row left `sending`), after a stop that
cut the send off — or as soon as it is queued for later, so the chat's next turn sees the
question answered. Otherwise the model would see two user turns in a row."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.core.errors import DeliveryPermanent, DeliveryTransient, DeliveryUncertain
from gateway.core.llm import TextPart
from gateway.core.messages import ChatRef, Outbound, SentReceipt
from gateway.turns.delivery import Delivery
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from vault.conversations import Conversations
from vault.db import Vault
from vault.migrations import migrate
from vault.outbox import History, Outbox

CHAT = ChatRef(channel="memory", chat_id="c1")


class HangingChannel(MemoryChannel):
    """The first send hangs (the request is out; no answer) after signalling `hanging`."""

    def __init__(self) -> None:
        super().__init__()
        self.hanging = asyncio.Event()

    async def send(self, out: Outbound) -> SentReceipt:
        if not self.hanging.is_set():
            self.hanging.set()
            await asyncio.Event().wait()
        return await super().send(out)


def snapshot(src: Path, dst: Path) -> None:
    """What a `kill -9` leaves on disk: every committed transaction, nothing else."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


def roles_and_texts(request_messages: object) -> list[tuple[str, str]]:
    found = []
    for message in request_messages:  # type: ignore[attr-defined]
        text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
        found.append((message.role, text))
    return found


async def history(vault: Vault) -> list[tuple[str, str]]:
    rows = await vault.fetchall("SELECT role, text FROM messages ORDER BY id")
    return [(r["role"], r["text"]) for r in rows]


async def next_turn_sees(db_dir: Path) -> list[tuple[str, str]]:
    """Start Iris on the vault in `db_dir`, send one more message, return what the model got."""
    llm, channel = FakeLLM("second answer"), MemoryChannel()
    async with app_with(make_config(db_dir), channel, llm) as app:
        await app.router.submit(inbound("and now?", message_id="m2"))
    assert channel.texts() == ["second answer"]
    return roles_and_texts(llm.requests[0].messages)


async def test_a_reply_interrupted_by_a_crash_joins_the_history_at_the_restart(
    tmp_path: Path,
) -> None:
    channel = HangingChannel()
    async with app_with(make_config(tmp_path), channel, FakeLLM("first answer")) as app:
        turn = app.router.submit(inbound("hello", message_id="m1"))
        await asyncio.wait_for(channel.hanging.wait(), 5)
        # The process dies here: the reply's row is `sending`, nothing else happens.
        snapshot(tmp_path / "iris.db", tmp_path / "after" / "iris.db")
        turn.cancel()
        await asyncio.wait([turn])
    seen = await next_turn_sees(tmp_path / "after")
    assert seen == [("user", "hello"), ("assistant", "first answer"), ("user", "and now?")]
    async with Vault(tmp_path / "after" / "iris.db") as vault:
        assert await vault.scalar("SELECT status FROM outbox WHERE text = 'first answer'") == (
            "uncertain"  # may have arrived: never resent
        )
        assert await history(vault) == [
            ("user", "hello"),
            ("assistant", "first answer"),
            ("user", "and now?"),
            ("assistant", "second answer"),
        ]


async def test_a_reply_cut_off_by_a_stop_joins_the_history_once(tmp_path: Path) -> None:
    channel = HangingChannel()
    cfg = make_config(tmp_path, router={"drain_timeout_s": 0})
    async with app_with(cfg, channel, FakeLLM("first answer")) as app:
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(stop))
        await asyncio.wait_for(channel.started.wait(), 5)
        assert channel.handler is not None
        await channel.handler([inbound("hello", message_id="m1")])
        await asyncio.wait_for(channel.hanging.wait(), 5)
        stop.set()
        await asyncio.wait_for(serving, 10)
    seen = await next_turn_sees(tmp_path)
    assert seen == [("user", "hello"), ("assistant", "first answer"), ("user", "and now?")]


async def _outbox(tmp_path: Path) -> tuple[Vault, Outbox, History]:
    vault = Vault(tmp_path / "v.db")
    await vault.__aenter__()
    await migrate(vault)
    conversations = Conversations(vault)
    rec = await conversations.record_inbound(
        inbound("hello", chat="c1", message_id="m1"), kind="chat", tokens=1, now_ms=1
    )
    assert rec is not None
    return vault, Outbox(vault), History(session=rec.session_pk, chat=rec.chat_pk, kind="chat",
                                         tokens=3)  # fmt: skip


def out(key: str, text: str) -> Outbound:
    return Outbound(chat=CHAT, text=text, idempotency_key=key)


async def test_a_queued_reply_joins_the_history_at_once_and_once(tmp_path: Path) -> None:
    vault, outbox, where = await _outbox(tmp_path)
    try:
        clock, channel = ManualClock(), MemoryChannel()
        channel.fail_with.append(DeliveryTransient("429", retry_after_s=600))
        first = Delivery(outbox=outbox, channels={"memory": channel}, clock=clock)
        assert (await first.deliver(out("k1", "later"), history=where)).status == "queued"
        # Answered, if not yet delivered: the chat's next turn must not answer it again.
        assert await history(vault) == [("user", "hello"), ("assistant", "later")]
        # The process stops; the next one's background resend sends the row when due.
        second = Delivery(outbox=outbox, channels={"memory": channel}, clock=clock)
        await second.settle_interrupted()
        assert await second.resend_pending() == clock.now_ms() + 600_000  # not due yet
        clock.advance(600)
        assert await second.resend_pending() is None
        assert channel.texts() == ["later"]
        assert await history(vault) == [("user", "hello"), ("assistant", "later")]
    finally:
        await vault.__aexit__(None, None, None)


async def test_live_outcomes_record_the_reply_exactly_when_it_may_have_been_seen(
    tmp_path: Path,
) -> None:
    vault, outbox, where = await _outbox(tmp_path)
    try:
        clock, channel = ManualClock(), MemoryChannel()
        d = Delivery(outbox=outbox, channels={"memory": channel}, clock=clock)
        channel.fail_with.append(DeliveryUncertain("reset after the request left"))
        assert (await d.deliver(out("k1", "maybe"), history=where)).status == "uncertain"
        channel.fail_with.append(DeliveryPermanent("400 bad request"))
        assert (await d.deliver(out("k2", "never"), history=where)).status == "failed"
        assert (await d.deliver(out("k3", "surely"), history=where)).status == "sent"
        # A later recovery pass finds nothing left to record: each text joined once.
        assert await d.settle_interrupted() == 0
        assert await history(vault) == [
            ("user", "hello"),
            ("assistant", "maybe"),
            ("assistant", "surely"),
        ]
    finally:
        await vault.__aexit__(None, None, None)
