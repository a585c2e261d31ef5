"""Replicas sharing one PostgreSQL vault: every inbound message answered once, in order per
chat, by one replica at a time; a dead replica's chats taken over after the lease; hints wake
the others without the poll.

Each replica is a real `App` on the same database (the pgserver fixture), all in one event
loop on one `ManualClock`: the poll and the lease renewal only ever run when a test advances
the clock, so whatever happens without an advance happened through a claim or a hint.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.llm import LLMRequest, LLMResponse, TextPart
from gateway.core.messages import Inbound
from gateway.core.ports import LLM
from gateway.features.contributions import Contributions
from gateway.turns.shared_intake import SharedIntake
from gateway.turns.turn import Next, Turn
from tests.conftest import make_config
from tests.fakes import MemoryChannel, inbound

TOKEN = re.compile(r"\b(c\d+)-m(\d+)\b")
LEASE_S = 15.0


@dataclass
class Ledger:
    """What the replicas did, seen from inside their turns."""

    calls: list[tuple[str, str]] = field(default_factory=list)  # (replica, token) per model call
    active: dict[str, str] = field(default_factory=dict)  # chat -> replica in a turn there
    overlaps: list[tuple[str, str, str]] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wait_calls(self, count: int) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: len(self.calls) >= count), 30)


class Watch:
    """A step around the agent: notes a second replica entering a chat one is still in."""

    name = "watch"

    def __init__(self, ledger: Ledger, replica: str) -> None:
        self.ledger, self.replica = ledger, replica

    def contribute(self, c: Contributions) -> None:
        c.step(self.step)

    async def step(self, turn: Turn, nxt: Next) -> None:
        chat = turn.inbound.chat.key
        if (other := self.ledger.active.get(chat)) is not None:
            self.ledger.overlaps.append((chat, other, self.replica))
        self.ledger.active[chat] = self.replica
        try:
            await nxt(turn)
        finally:
            self.ledger.active.pop(chat, None)


class Echo:
    """The model: answers "re: <token>" for the message's token; `stuck` holds every call
    until the turn is cancelled (a replica that dies mid-turn)."""

    def __init__(self, ledger: Ledger, replica: str, *, stuck: bool = False) -> None:
        self.ledger, self.replica, self.stuck = ledger, replica, stuck
        self.called = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        text = " ".join(p.text for p in request.messages[-1].parts if isinstance(p, TextPart))
        token = "-m".join(TOKEN.findall(text)[-1])
        self.called.set()
        if self.stuck:
            await asyncio.Event().wait()
        for _ in range(3):  # give the other replica every chance to step into this chat
            await asyncio.sleep(0)
        async with self.ledger.changed:
            self.ledger.calls.append((self.replica, token))
            self.ledger.changed.notify_all()
        return LLMResponse(
            parts=(TextPart(f"re: {token}"),), stop_reason="end_turn", model="fake",
            input_tokens=1, output_tokens=1,
        )  # fmt: skip


def replica_app(
    tmp_path: Path, pg_url: str, name: str, llm: LLM, ledger: Ledger, clock: ManualClock,
    channel: MemoryChannel,
) -> App:  # fmt: skip
    config = make_config(
        tmp_path / name,
        vault={"url": pg_url, "replica_id": name, "inbound_lease_s": LEASE_S},
        router={"drain_timeout_s": 0 if getattr(llm, "stuck", False) else 10},
    )
    return App(config=config, channels=[channel], llm_override=llm, use_llm_override=True,
               clock=clock, features=[Watch(ledger, name)])  # fmt: skip


def shared(app: App) -> SharedIntake:
    assert isinstance(app.intake, SharedIntake)
    return app.intake


@asynccontextmanager
async def serving(app: App, channel: MemoryChannel) -> AsyncIterator[asyncio.Task[None]]:
    """The replica serving (its hints listened to) until the block ends, then stopped and
    drained; the task, for a test that kills it instead."""
    stop = asyncio.Event()
    task = asyncio.create_task(app.serve(stop))
    try:
        await asyncio.wait_for(channel.started.wait(), 5)
        hints = shared(app).hints
        assert hints is not None
        await asyncio.wait_for(hints.listening.wait(), 5)
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.wait([task]), 10)


async def deliver(channel: MemoryChannel, message: Inbound) -> None:
    assert channel.handler is not None
    await channel.handler([message])


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql.encode()).fetchall()


def message(chat: int, n: int) -> Inbound:
    return inbound(f"c{chat}-m{n:02d}", chat=f"c{chat}", message_id=f"c{chat}-{n}")


async def test_two_replicas_answer_each_message_once_in_order_never_both_in_a_chat(
    tmp_path: Path, pg_url: str
) -> None:
    ledger, clock = Ledger(), ManualClock()
    chans = {"a": MemoryChannel(), "b": MemoryChannel()}
    chats, per_chat = 6, 8
    async with AsyncExitStack() as stack:
        apps = {
            name: await stack.enter_async_context(
                replica_app(tmp_path, pg_url, name, Echo(ledger, name), ledger, clock, chan)
            )
            for name, chan in chans.items()
        }
        for name, app in apps.items():
            await stack.enter_async_context(serving(app, chans[name]))
        # Round robin over the replicas, chats interleaved; every third message is delivered
        # again to the other replica (a platform retrying through the load balancer).
        for n in range(per_chat):
            for chat in range(chats):
                first, other = ("a", "b") if (n + chat) % 2 == 0 else ("b", "a")
                await deliver(chans[first], message(chat, n))
                if n % 3 == 0:
                    await deliver(chans[other], message(chat, n))
        await ledger.wait_calls(chats * per_chat)
        for app in apps.values():
            await app.vault.idle()
    # Both stopped (drained): nothing more can be answered.
    answers = Counter(chans["a"].texts() + chans["b"].texts())
    expected = {f"re: c{c}-m{n:02d}" for c in range(chats) for n in range(per_chat)}
    assert set(answers) == expected
    assert set(answers.values()) == {1}
    assert len(ledger.calls) == chats * per_chat
    for chat in range(chats):
        order = [token for _, token in ledger.calls if token.startswith(f"c{chat}-")]
        assert order == [f"c{chat}-m{n:02d}" for n in range(per_chat)]
    assert ledger.overlaps == []
    assert {replica for replica, _ in ledger.calls} == {"a", "b"}  # both did work
    assert rows(pg_url, "SELECT count(*) FROM intake WHERE state = 'pending'") == [(0,)]
    assert rows(pg_url, "SELECT count(*) FROM intake_claims") == [(0,)]


async def test_a_dead_replica_s_chat_is_taken_over_after_the_lease_and_answered_once(
    tmp_path: Path, pg_url: str
) -> None:
    ledger, clock = Ledger(), ManualClock()
    chan_a, chan_b = MemoryChannel(), MemoryChannel()
    stuck = Echo(ledger, "a", stuck=True)
    echo_b = Echo(ledger, "b")
    async with (
        replica_app(tmp_path, pg_url, "a", stuck, ledger, clock, chan_a) as a,
        serving(a, chan_a) as a_task,
    ):
        await deliver(chan_a, message(1, 1))  # a claims c1 and records it, then hangs
        await asyncio.wait_for(stuck.called.wait(), 5)
        async with (
            replica_app(tmp_path, pg_url, "b", echo_b, ledger, clock, chan_b) as b,
            serving(b, chan_b),
        ):
            # Starting, b resumed nothing: a live replica runs c1.
            assert shared(b).held == [] and not echo_b.called.is_set()
            await deliver(chan_b, message(1, 2))  # saved by b, left to a
            assert shared(b).held == []
            assert rows(pg_url, "SELECT replica FROM intake_claims") == [("a",)]
            # a dies: its tasks cancelled, its turn cut off, nothing given back.
            a_task.cancel()
            await asyncio.wait([a_task])
            await a.router.drain()
            await a.vault.idle()
            assert rows(pg_url, "SELECT replica FROM intake_claims") == [("a",)]
            clock.advance(LEASE_S / 2)  # a's lease still holds: nothing to take
            assert await shared(b).replay() == 0
            assert shared(b).held == [] and not echo_b.called.is_set()
            clock.advance(LEASE_S / 2 + 1)  # now it expired: b's poll takes c1 over
            await ledger.wait_calls(2)
    assert [token for _, token in ledger.calls] == ["c1-m01", "c1-m02"]
    assert chan_a.texts() == []
    assert chan_b.texts() == ["re: c1-m01", "re: c1-m02"]
    # The first message was recorded once (by a), resumed by b, and both answers are history.
    texts = rows(pg_url, "SELECT role, text FROM messages ORDER BY id")
    assert [t for r, t in texts if r == "user"] == ["c1-m01", "c1-m02"]
    assert rows(pg_url, "SELECT count(*) FROM intake_claims") == [(0,)]


async def test_a_stopping_replica_hands_its_chats_over_by_hint_without_the_poll(
    tmp_path: Path, pg_url: str
) -> None:
    ledger, clock = Ledger(), ManualClock()
    chan_a, chan_b = MemoryChannel(), MemoryChannel()
    stuck = Echo(ledger, "a", stuck=True)
    async with (
        replica_app(tmp_path, pg_url, "a", stuck, ledger, clock, chan_a) as a,
        replica_app(tmp_path, pg_url, "b", Echo(ledger, "b"), ledger, clock, chan_b) as b,
        serving(b, chan_b),
    ):
        async with serving(a, chan_a):
            await deliver(chan_a, message(1, 1))
            await asyncio.wait_for(stuck.called.wait(), 5)
        # a stopped (drain deadline 0: the turn was cut off) and gave c1 up with a hint; b
        # takes it at once — the clock never moves, so b's poll never ran.
        await ledger.wait_calls(1)
        # A message saved by a replica that no longer runs turns goes to the others too.
        await a.intake([message(2, 1)])
        await ledger.wait_calls(2)
    assert ledger.calls == [("b", "c1-m01"), ("b", "c2-m01")]
    assert chan_b.texts() == ["re: c1-m01", "re: c2-m01"]


async def test_a_replica_restarted_under_its_name_resumes_its_chats_at_once(
    tmp_path: Path, pg_url: str
) -> None:
    ledger, clock = Ledger(), ManualClock()
    first, stuck = MemoryChannel(), Echo(ledger, "a", stuck=True)
    async with (
        replica_app(tmp_path, pg_url, "a", stuck, ledger, clock, first) as a,
        serving(a, first) as task,
    ):
        await deliver(first, message(1, 1))
        await asyncio.wait_for(stuck.called.wait(), 5)
        task.cancel()  # killed mid-turn: the claim stays
        await asyncio.wait([task])
        await a.router.drain()
    assert rows(pg_url, "SELECT replica FROM intake_claims") == [("a",)]
    # The same `replica_id` starting again: the claim is its previous process's, taken over at
    # start without waiting for the lease (the clock never moves).
    second = MemoryChannel()
    again = replica_app(tmp_path, pg_url, "a", Echo(ledger, "a"), ledger, clock, second)
    async with again as a, serving(a, second):
        await ledger.wait_calls(1)
    assert second.texts() == ["re: c1-m01"]
    assert rows(pg_url, "SELECT count(*) FROM messages WHERE role = 'user'") == [(1,)]
