"""Access decisions made by another process on the same vault apply here: the README has an
admin approve a pairing code from `iris chat` while `iris run` serves Telegram (and replicas
share one PostgreSQL vault). Before, a running process kept the grants it read at start."""

from __future__ import annotations

from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.turns.steps import GRANTS_RELOAD_MS
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound


async def test_allow_and_deny_from_another_process_apply_within_the_reload_period(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, auth={"allow": ["console:*"], "admins": ["memory:boss"]})
    clock = ManualClock()
    served = MemoryChannel()
    console = MemoryChannel(name="console")
    async with (
        app_with(config, served, FakeLLM("hello stranger"), clock) as running,
        app_with(config, console, FakeLLM(), clock) as terminal,
    ):
        await running.router.submit(inbound("hi?", user="newcomer", chat="newcomer"))
        assert served.texts()[-1].startswith("Sorry — you're not authorized")
        before = len(served.texts())
        await terminal.router.submit(
            inbound("/admin allow memory:newcomer", channel="console", user="me", chat="me")
        )
        assert "can talk to Iris now" in console.texts()[-1]
        clock.advance(GRANTS_RELOAD_MS / 1000)
        await running.router.submit(inbound("and now?", user="newcomer", chat="newcomer"))
        assert served.texts()[before:] == ["hello stranger"]

        await terminal.router.submit(
            inbound("/admin deny memory:newcomer", channel="console", user="me", chat="me")
        )
        clock.advance(GRANTS_RELOAD_MS / 1000)
        await running.router.submit(inbound("still there?", user="newcomer", chat="newcomer"))
        assert served.texts()[before:] == ["hello stranger"]  # ignored from now on
