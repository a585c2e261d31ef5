"""The router on its own: plain steps, a replier that only takes notes, no app and no vault.

What is tested here is what the router owns: the chain runs in order, a chat's turns run one
at a time while chats run side by side, the concurrency limit, drain, and the error handler's
notices (the fixed apology, never an exception's text, and nothing for a turn the auth step
did not admit). The pipeline's behaviour through the whole app is in `test_steps.py`.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.core.clock import ManualClock
from gateway.core.errors import (
    DeliveryPermanent,
    ModelNotConfigured,
    ModelUnavailable,
    UserInputError,
)
from gateway.core.messages import OutboundKind
from gateway.core.metrics import Metrics
from gateway.turns.commands import Hint
from gateway.turns.delivery import DeliveryResult, DeliveryStatus
from gateway.turns.replies import Replier
from gateway.turns.router import APOLOGY, MODEL_DOWN, NO_MODEL, Router
from gateway.turns.turn import Next, Step, Turn
from tests.fakes import inbound


class Notes(Replier):
    """A `Replier` that writes down what it is asked to send instead of delivering it."""

    def __init__(self, *, failing: bool = False) -> None:  # no delivery, vault or channel
        self.sent: list[tuple[str, str, str, OutboundKind]] = []  # (chat key, text, kind, out)
        self.failing = failing

    def hint_for(self, channel: str) -> Hint:
        return lambda command: f"{channel}!{command}"

    async def send(
        self,
        turn: Turn,
        text: str,
        *,
        kind: str = "chat",
        out_kind: OutboundKind = OutboundKind.REPLY,
    ) -> DeliveryResult:
        if self.failing:
            raise DeliveryPermanent("the channel refused it")
        self.sent.append((turn.inbound.chat.key, text, kind, out_kind))
        return DeliveryResult(DeliveryStatus.SENT, len(self.sent))

    def texts(self) -> list[str]:
        return [text for _, text, _, _ in self.sent]


def router(
    *steps: Step, notes: Notes | None = None, max_concurrency: int = 32, drain_timeout_s: float = 10
) -> Router:
    return Router(
        steps=steps,
        replier=notes or Notes(),
        clock=ManualClock(),
        max_concurrency=max_concurrency,
        drain_timeout_s=drain_timeout_s,
    )


async def admit(turn: Turn, nxt: Next) -> None:
    """The auth step's part the router cares about: the turn is admitted."""
    turn.authorized = True
    await nxt(turn)


def failing(exc: Exception) -> Step:
    async def fail(turn: Turn, nxt: Next) -> None:
        raise exc

    return fail


async def test_steps_run_in_order_on_a_turn_stamped_with_the_clock() -> None:
    clock = ManualClock(start_ms=5_000)
    metrics = Metrics()
    seen: list[tuple[str, int]] = []

    def step(name: str, *, stop: bool = False) -> Step:
        async def run(turn: Turn, nxt: Next) -> None:
            seen.append((name, turn.now_ms))
            if not stop:
                await nxt(turn)
            seen.append((f"/{name}", turn.now_ms))

        return run

    async with Router(
        steps=[step("a"), step("b", stop=True), step("never")],
        replier=Notes(),
        clock=clock,
        metrics=metrics,
    ) as r:
        await r.submit(inbound("hi"))
    assert seen == [("a", 5_000), ("b", 5_000), ("/b", 5_000), ("/a", 5_000)]
    assert metrics.inbound.values == {("memory",): 1.0}


async def test_a_chat_runs_strictly_in_order_while_other_chats_run_alongside() -> None:
    release = asyncio.Event()
    started: list[str] = []
    finished: list[str] = []

    async def step(turn: Turn, nxt: Next) -> None:
        started.append(turn.inbound.text)
        if turn.inbound.text == "a1":
            await release.wait()
        finished.append(turn.inbound.text)

    async with router(step) as r:
        tasks = [r.submit(inbound(t, chat=t[0])) for t in ("a1", "a2", "b1", "a3")]
        await tasks[2]  # b1, in another chat, is done while a1 holds chat a
        assert started == ["a1", "b1"]
        release.set()
        await asyncio.gather(*tasks)
    assert started == ["a1", "b1", "a2", "a3"]
    assert finished == ["b1", "a1", "a2", "a3"]


async def test_the_concurrency_limit_bounds_turns_across_chats() -> None:
    chats = ("x", "y", "z")
    entered = {chat: asyncio.Event() for chat in chats}
    leave = {chat: asyncio.Event() for chat in chats}
    running: set[str] = set()

    async def step(turn: Turn, nxt: Next) -> None:
        chat = turn.inbound.chat.chat_id
        running.add(chat)
        entered[chat].set()
        await leave[chat].wait()
        running.discard(chat)

    async with router(step, max_concurrency=2) as r:
        tasks = [r.submit(inbound("hi", chat=chat)) for chat in chats]
        await entered["x"].wait()
        await entered["y"].wait()
        assert running == {"x", "y"}  # z has a chat of its own but no slot
        leave["x"].set()
        await tasks[0]
        await entered["z"].wait()
        assert running == {"y", "z"}
        leave["y"].set()
        leave["z"].set()
        await asyncio.gather(*tasks)
    assert running == set()


async def test_drain_refuses_new_turns_and_waits_for_those_in_flight() -> None:
    entered = asyncio.Event()
    gate = asyncio.Event()
    seen: list[str] = []

    async def step(turn: Turn, nxt: Next) -> None:
        seen.append(turn.inbound.text)
        entered.set()
        await gate.wait()

    r = router(step)
    task = r.submit(inbound("slow"))
    await entered.wait()
    draining_started = asyncio.Event()

    async def drain() -> None:
        draining_started.set()
        await r.drain()  # closes intake before its first suspension

    draining = asyncio.create_task(drain())
    await draining_started.wait()
    late = r.submit(inbound("late"))
    assert late.done()  # refused at once
    assert not draining.done() and r.in_flight == 1
    gate.set()
    await draining
    assert task.done() and not task.cancelled()
    assert seen == ["slow"]
    assert r.in_flight == 0


async def test_drain_cancels_turns_still_running_at_its_deadline() -> None:
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(turn: Turn, nxt: Next) -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    notes = Notes()
    r = router(admit, stuck, notes=notes, drain_timeout_s=0.0)
    task = r.submit(inbound("stuck"))
    await entered.wait()
    await r.drain()
    assert task.cancelled() and cancelled.is_set()
    assert notes.sent == []  # a cancelled turn is not an error: no apology


async def test_an_unexpected_error_gets_the_fixed_apology_never_its_text() -> None:
    notes = Notes()
    async with router(admit, failing(KeyError("internal-key-name")), notes=notes) as r:
        await r.submit(inbound("hi"))
    assert notes.sent == [("memory:c1", APOLOGY, "notice", OutboundKind.NOTICE)]


@pytest.mark.parametrize(
    ("error", "notice"),
    [
        (UserInputError("That date is in the past."), "That date is in the past."),
        (ModelUnavailable("HTTP 529 from upstream"), MODEL_DOWN.format(when="in a minute")),
        (
            ModelUnavailable("HTTP 429", retry_after_s=3 * 3600),
            MODEL_DOWN.format(when="in about 3 hours"),
        ),
        (ModelNotConfigured("no key"), NO_MODEL.format(help="memory!help")),
    ],
)
async def test_known_errors_get_their_own_notice(error: Exception, notice: str) -> None:
    notes = Notes()
    async with router(admit, failing(error), notes=notes) as r:
        await r.submit(inbound("hi"))
    assert notes.texts() == [notice]


@pytest.mark.parametrize(
    "error",
    [RuntimeError("boom"), UserInputError("bad"), ModelUnavailable("down"), ModelNotConfigured()],
)
async def test_a_turn_the_auth_step_did_not_admit_gets_no_error_notice(error: Exception) -> None:
    notes = Notes()
    async with router(failing(error), notes=notes) as r:
        await r.submit(inbound("hi"))
    assert notes.sent == []


async def test_a_notice_that_cannot_be_sent_is_logged_and_the_turn_still_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with router(admit, failing(RuntimeError("boom")), notes=Notes(failing=True)) as r:
        with caplog.at_level(logging.ERROR, logger="gateway.turns.router"):
            await r.submit(inbound("hi"))
            await r.submit(inbound("again"))  # the chat is not left locked
    assert [rec.message for rec in caplog.records].count(
        "could not send the error notice to memory:c1"
    ) == 2
