"""The typing indicator on the manual clock: none for a reply ready within `TYPING_DELAY_S`,
then one refreshed every `TYPING_REFRESH_S` while the model works, and none after the reply."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.core.llm import LLMRequest, LLMResponse, TextPart
from gateway.core.messages import ChatRef
from gateway.turns.replies import TYPING_DELAY_S, TYPING_REFRESH_S
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound


class TypingChannel(MemoryChannel):
    """Puts the clock's time of each typing call on `typed`."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self.typed: asyncio.Queue[int] = asyncio.Queue()

    async def typing(self, chat: ChatRef) -> None:
        await super().typing(chat)
        self.typed.put_nowait(self.clock.now_ms())


class GatedLLM:
    """Answers once `release` is set, after signalling `called`."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.called.set()
        await self.release.wait()
        return LLMResponse(parts=(TextPart("done"),), stop_reason="end_turn", model="fake")


async def test_a_quick_reply_sends_no_typing_indicator(tmp_path: Path) -> None:
    clock = ManualClock()
    channel = TypingChannel(clock)
    async with app_with(make_config(tmp_path), channel, FakeLLM("quick"), clock) as app:
        await app.router.submit(inbound("hi"))
        clock.advance(10 * TYPING_REFRESH_S)  # a typing task left behind would wake now
        await app.router.submit(inbound("again", message_id="m2"))
    assert channel.texts() == ["quick", "quick"]
    assert channel.typing_calls == 0


async def test_a_slow_reply_shows_typing_after_the_delay_until_it_is_sent(
    tmp_path: Path,
) -> None:
    clock, llm = ManualClock(), GatedLLM()
    channel = TypingChannel(clock)
    start = clock.now_ms()
    async with app_with(make_config(tmp_path), channel, llm, clock) as app:
        turn = app.router.submit(inbound("think hard"))
        await asyncio.wait_for(llm.called.wait(), 5)
        clock.advance(TYPING_DELAY_S / 2)
        assert channel.typing_calls == 0
        clock.advance(TYPING_DELAY_S / 2)
        assert await asyncio.wait_for(channel.typed.get(), 5) == start + TYPING_DELAY_S * 1000
        clock.advance(TYPING_REFRESH_S)
        refreshed = await asyncio.wait_for(channel.typed.get(), 5)
        assert refreshed == start + (TYPING_DELAY_S + TYPING_REFRESH_S) * 1000
        llm.release.set()
        await asyncio.wait_for(turn, 5)
        clock.advance(10 * TYPING_REFRESH_S)
    assert channel.texts() == ["done"]
    assert channel.typing_calls == 2
