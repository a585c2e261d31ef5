"""Turn slots: a holder can step out and back in; cancellation never frees a slot twice."""

from __future__ import annotations

import asyncio

from gateway.core.slots import TurnSlots


async def test_stepping_out_lets_another_turn_in_and_waits_to_come_back() -> None:
    slots = TurnSlots(1)
    out, back, b_left = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def waiting_on_the_model() -> None:
        async with slots.hold():
            async with slots.stepped_out():
                out.set()
                await back.wait()
            assert b_left.is_set()  # it got its slot back only after B left

    async def other_chat() -> None:
        async with slots.hold():
            back.set()
        b_left.set()

    a = asyncio.create_task(waiting_on_the_model())
    await asyncio.wait_for(out.wait(), 5)
    await asyncio.wait_for(other_chat(), 5)
    await asyncio.wait_for(a, 5)
    assert not slots.all_held


async def test_stepping_out_without_a_slot_does_nothing() -> None:
    slots = TurnSlots(1)
    async with slots.stepped_out():  # a background job calling the model
        assert not slots.all_held
    async with slots.hold():
        assert slots.all_held
    assert not slots.all_held


async def test_cancelled_while_out_releases_nothing_twice() -> None:
    slots = TurnSlots(1)
    out, b_in, release_b = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def a_turn() -> None:
        async with slots.hold(), slots.stepped_out():
            out.set()
            await asyncio.Event().wait()  # the model never answers

    async def b_turn() -> None:
        async with slots.hold():
            b_in.set()
            await release_b.wait()

    a = asyncio.create_task(a_turn())
    await asyncio.wait_for(out.wait(), 5)
    b = asyncio.create_task(b_turn())
    await asyncio.wait_for(b_in.wait(), 5)
    a.cancel()  # A now waits, cancelled, for its slot back
    release_b.set()
    await asyncio.wait_for(b, 5)
    await asyncio.gather(a, return_exceptions=True)
    assert a.cancelled()
    assert not slots.all_held
    async with slots.hold():
        assert slots.all_held  # still one slot, not two
