from __future__ import annotations

import asyncio
import io
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from channels.console import STOPPING, WELCOME, ConsoleChannel
from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.errors import FatalChannelError
from gateway.core.messages import ChatRef, Inbound, Outbound, RejectedInbound
from gateway.core.ports import InboundHandler
from tests.conftest import make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound, run_clock_until


async def test_ctrl_c_says_that_what_is_typed_now_is_not_read() -> None:
    """The terminal echoes a line typed while Iris stops; it is never read, and says so."""
    read, write = os.pipe()  # stdin that stays open: the reader waits
    out = io.StringIO()
    with os.fdopen(read) as stdin:
        console = ConsoleChannel(stdin=stdin, stdout=out, interactive=True)

        async def intake(batch: Sequence[Inbound | RejectedInbound]) -> list[Any]:
            return []

        running = asyncio.create_task(console.run(intake))
        await asyncio.sleep(0)  # one step: the task runs to its first wait, for a line
        assert out.getvalue() == f"{WELCOME}\nyou> "
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        os.close(write)  # end of input: the reader thread leaves before stdin is closed
        for thread in threading.enumerate():
            if thread.name == "console-stdin":
                thread.join(10)
    assert out.getvalue().endswith(f"you> \n{STOPPING}\n")
    assert console.done.is_set()


async def test_console_interactive_prompts_and_plain_replies() -> None:
    out = io.StringIO()
    console = ConsoleChannel(
        stdin=io.StringIO("hi\n\n/help\n/quit now\nnever read\n"), stdout=out, interactive=True
    )
    seen: list[Inbound] = []

    async def answer(message: Inbound) -> None:
        seen.append(message)
        await console.send(
            Outbound(
                chat=message.chat, text=f"**re** {message.text}", idempotency_key=message.message_id
            )
        )

    async def intake(batch: Sequence[Inbound | RejectedInbound]) -> list[asyncio.Future[None]]:
        return [asyncio.ensure_future(answer(m)) for m in batch if isinstance(m, Inbound)]

    await console.run(intake)
    assert [m.text for m in seen] == ["hi", "/help"]
    assert seen[0].message_id != seen[1].message_id
    assert out.getvalue() == f"{WELCOME}\nyou> iris> re hi\nyou> you> iris> re /help\nyou> "
    assert console.done.is_set()


async def test_serve_stops_intake_drains_and_returns(
    config: object, llm: FakeLLM, channel: MemoryChannel
) -> None:
    async with App(
        config=config,
        channels=[channel],
        llm_override=llm,  # type: ignore[arg-type]
        use_llm_override=True,
        clock=ManualClock(),
    ) as app:
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(stop))
        await channel.started.wait()
        assert channel.handler is not None
        (turn,) = await channel.handler([inbound("hello")])  # saved and scheduled
        stop.set()
        await serving
        await turn
    assert channel.texts() == ["ok"]


class Flaky(MemoryChannel):
    def __init__(self, failures: list[BaseException]) -> None:
        super().__init__()
        self.failures = failures
        self.runs = 0

    async def run(self, on_inbound: InboundHandler) -> None:
        self.runs += 1
        if self.failures:
            raise self.failures.pop(0)
        await super().run(on_inbound)


async def test_a_crashing_channel_is_restarted_with_backoff(tmp_path: Path, llm: FakeLLM) -> None:
    clock = ManualClock()
    flaky = Flaky([ConnectionError("reset"), ConnectionError("reset")])
    async with App(
        config=make_config(tmp_path),
        channels=[flaky],
        llm_override=llm,
        use_llm_override=True,
        clock=clock,
    ) as app:
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(stop))
        await run_clock_until(clock, flaky.started.is_set)
        stop.set()
        await serving
    assert flaky.runs == 3


async def test_a_fatal_channel_error_stops_the_app(tmp_path: Path, llm: FakeLLM) -> None:
    flaky = Flaky([FatalChannelError("invalid bot token")])
    async with App(
        config=make_config(tmp_path),
        channels=[flaky],
        llm_override=llm,
        use_llm_override=True,
        clock=ManualClock(),
    ) as app:
        with pytest.raises(FatalChannelError, match="invalid bot token"):
            await app.serve(asyncio.Event())


def test_chat_ref_keys() -> None:
    assert ChatRef(channel="telegram", chat_id="1").key == "telegram:1"
    assert ChatRef(channel="telegram", chat_id="1", thread_id="9").key == "telegram:1:9"
