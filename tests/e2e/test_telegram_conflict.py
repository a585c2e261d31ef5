"""A second poller on the bot token (Telegram answers getUpdates with 409 Conflict), through the
real python-telegram-bot against the loopback Bot API: one alarm in the log, `/healthz` not ok
while it lasts, retries backing off on the clock (never a tight loop), and all clear once a
poll succeeds again."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from channels.telegram import TelegramChannel
from gateway.app.app import App
from gateway.core.clock import ManualClock
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM
from tests.fakes.bot_api_server import BotAPIServer
from tests.fakes.clock import run_clock_until

TOKEN = "123456:conflict-test"


async def healthz(app: App) -> tuple[int, dict[str, object]]:
    assert app.http is not None
    url = f"http://127.0.0.1:{app.http.port}/healthz"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


def alarm_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and "409" in r.getMessage()
            and "over" not in r.getMessage()]  # fmt: skip


async def test_a_409_is_one_alarm_in_the_log_and_in_healthz_until_polling_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    config = make_config(
        tmp_path,
        vault={"path": str(tmp_path / "iris.db"), "replica_id": "iris-a"},
        http={"enabled": True, "port": 0},
    )
    async with BotAPIServer() as api:
        api.conflict = True
        channel = TelegramChannel(token=TOKEN, base_url=api.base_url, poll_timeout_s=1)
        async with app_with(config, channel, FakeLLM(), clock) as app:
            started_ms = clock.now_ms()
            async with app_serving(app, channel.started):
                await run_clock_until(clock, lambda: api.conflicts >= 4)
                # Backed off on the clock between attempts: 1 + 2 + 4 s at least.
                assert clock.now_ms() - started_ms >= 7_000
                status, body = await healthz(app)
                assert status == 503
                assert body["ok"] is False
                telegram = body["channels"]["telegram"]  # type: ignore[index]
                assert telegram["connected"] is False
                assert "conflict (409)" in telegram["detail"]
                assert body["replica"] == "iris-a"
                assert body["leaderships"] == ["telegram-polling"]  # SQLite: always the leader
                assert len(alarm_lines(caplog)) == 1  # once, not per retry

                api.conflict = False  # the other poller stopped
                await run_clock_until(clock, lambda: channel.health().connected)
                status, body = await healthz(app)
                assert (status, body["ok"], body["problems"]) == (200, True, [])
    over = [r for r in caplog.records if "conflict is over" in r.getMessage()]
    assert len(over) == 1
    assert len(alarm_lines(caplog)) == 1
