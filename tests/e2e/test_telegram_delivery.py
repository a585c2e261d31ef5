"""Telegram delivery end to end (faked Bot API -> real adapter -> App): a send that never left
is retried and arrives once, a long Retry-After freezes no chat, and `/healthz` says when
Telegram cannot be delivered to, until it can again."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import httpx
import respx

from channels.telegram import TelegramChannel
from gateway.app.app import App
from gateway.core.clock import ManualClock
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM, run_clock_until
from tests.fakes.telegram import BASE, TOKEN, FakeBotAPI, error, message_update

ALICE, BOB = 42, 43


@asynccontextmanager
async def serving(
    tmp_path: Path, llm: FakeLLM, failures: deque[Exception], clock: ManualClock | None = None
) -> AsyncIterator[tuple[App, FakeBotAPI]]:
    """The app on a polling Telegram channel with /healthz; each of `failures` is raised by
    the HTTP client for one sendMessage, before the fake Bot API sees it."""
    config = make_config(
        tmp_path,
        auth={"allow": [f"telegram:{ALICE}", f"telegram:{BOB}"]},
        http={"enabled": True, "port": 0},
    )
    with respx.mock(assert_all_called=False) as router:
        api = FakeBotAPI(router)
        api.send_errors.extend(failures)
        channel = TelegramChannel(token=TOKEN, base_url=BASE)
        async with (
            app_with(config, channel, llm, clock) as app,
            app_serving(app, channel.started),
        ):
            yield app, api


async def turns_done() -> None:
    """Until the turns the router is running now have ended."""
    turns = [t for t in asyncio.all_tasks() if t.get_name().startswith("turn ")]
    await asyncio.wait_for(asyncio.gather(*turns), 5)


async def healthz(app: App) -> tuple[int, dict[str, object]]:
    assert app.http is not None
    url = f"http://127.0.0.1:{app.http.port}/healthz"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


async def test_a_send_the_client_never_made_is_retried_and_arrives_once(tmp_path: Path) -> None:
    failures: deque[Exception] = deque(
        [httpx.PoolTimeout("every connection busy"), httpx.ConnectError("refused")]
    )
    async with serving(tmp_path, FakeLLM("answer"), failures) as (app, api):
        api.queue_updates(message_update("hi", user_id=ALICE))
        (reply,) = await api.wait_sent(1)
        await turns_done()
        counts = dict(app.metrics.delivery_attempts.values)
    assert reply["text"] == "answer"
    assert len(api.attempts) == 1  # the two failed tries never reached the Bot API
    assert counts == {("telegram", "transient"): 2, ("telegram", "sent"): 1}


async def test_an_uncertain_send_is_not_resent_and_health_says_so_until_one_arrives(
    tmp_path: Path,
) -> None:
    failures: deque[Exception] = deque([httpx.ReadTimeout("no answer after sending")])
    async with serving(tmp_path, FakeLLM("answer"), failures) as (app, api):
        api.queue_updates(message_update("first", user_id=ALICE))
        await api.wait_polls(2)  # handed over
        await turns_done()
        status, report = await healthz(app)
        assert status == 503
        telegram = report["channels"]["telegram"]  # type: ignore[index]
        assert telegram["connected"] is True and telegram["delivering"] is False
        assert "ReadTimeout" in telegram["delivery_detail"]

        api.queue_updates(message_update("second", user_id=BOB))
        await api.wait_sent(1)
        await turns_done()
        status, report = await healthz(app)
    assert status == 200 and report["ok"] is True
    assert [m["chat_id"] for m in api.sent] == [str(BOB)]  # the uncertain one was never resent


async def test_a_long_retry_after_freezes_no_chat(tmp_path: Path) -> None:
    clock = ManualClock()
    llm = FakeLLM()
    async with serving(tmp_path, llm, deque(), clock) as (app, api):
        api.send_script.append(error(429, "Too Many Requests: retry after 600", retry_after=600))
        api.queue_updates(message_update("one", user_id=ALICE))
        await api.wait_polls(2)
        await turns_done()
        assert await app.outbox.counts() == {"pending": 1}
        # Alice's chat is free again: her next message is answered behind the first reply;
        # Bob is answered at once.
        api.queue_updates(
            message_update("two", user_id=ALICE), message_update("hello", user_id=BOB)
        )
        (to_bob,) = await api.wait_sent(1)
        assert to_bob["chat_id"] == str(BOB)
        await run_clock_until(clock, lambda: len(api.sent) == 3)  # ten minutes later
    to_alice = [m for m in api.sent if m["chat_id"] == str(ALICE)]
    assert len(to_alice) == 2
    assert api.sent[1:] == to_alice  # the first reply first, after Retry-After
