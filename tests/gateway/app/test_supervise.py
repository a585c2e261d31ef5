"""The app's channel supervisor: backoff on a lost link, reset after a healthy run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.app.app import App
from gateway.core.errors import ChannelUnavailable
from gateway.core.ports import InboundHandler
from tests.conftest import make_config
from tests.fakes import FakeLLM, MemoryChannel


class RecordingClock:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000
        self.sleeps: list[float] = []

    def now_ms(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += int(seconds * 1000)
        await asyncio.sleep(0)

    async def sleep_until(self, when_ms: int) -> None:
        await self.sleep((when_ms - self.now) / 1000)


class FlakyChannel(MemoryChannel):
    def __init__(self, clock: RecordingClock, stop: asyncio.Event) -> None:
        super().__init__()
        self.clock, self.stop, self.runs = clock, stop, 0

    async def run(self, on_inbound: InboundHandler) -> None:
        self.runs += 1
        if self.runs == 4:
            self.clock.now += 120_000  # this run stayed up for two minutes
        if self.runs >= 6:
            self.stop.set()
            await asyncio.Event().wait()
        raise ChannelUnavailable("link lost")


async def test_backoff_doubles_and_resets_after_a_healthy_run(tmp_path: Path) -> None:
    clock, stop = RecordingClock(), asyncio.Event()
    channel = FlakyChannel(clock, stop)
    async with App(
        config=make_config(tmp_path, proactive={"enabled": False}),
        channels=[channel],
        llm_override=FakeLLM(),
        use_llm_override=True,
        clock=clock,
    ) as app:
        await asyncio.wait_for(app.serve(stop), 5)
    assert clock.sleeps == [1, 2, 4, 1, 2]
