"""Model faults answered in bounded time, through the whole app: config -> `open_model` -> the
real Anthropic adapter -> a loopback fault server. Deadlines are made small in the config
instead of waiting; each test only bounds itself with a generous timeout."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.agent.agent import Agent
from gateway.agent.context import ContextPipeline
from gateway.agent.tools import ToolRegistry
from gateway.agent.traces import TraceStore
from gateway.app.app import App
from gateway.app.config import Config, Secrets
from gateway.app.model import KEY_REJECTED_NOTICE
from gateway.core.clock import ManualClock
from gateway.core.errors import ModelUnavailable
from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse
from gateway.core.messages import ChatRef, Outbound, SentReceipt
from gateway.turns.router import KEY_REFUSED, KEY_REFUSED_ADMIN, MODEL_DOWN, MODEL_REFUSED
from tests.conftest import make_config
from tests.fakes import MemoryChannel, inbound
from tests.fakes.anthropic_server import AnthropicFaultServer
from vault.usage import UsageLog

GENEROUS_S = 10


class WatchedChannel(MemoryChannel):
    """A memory channel one can wait on until it has sent something."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Condition()

    async def send(self, out: Outbound) -> SentReceipt:
        receipt = await super().send(out)
        async with self.changed:
            self.changed.notify_all()
        return receipt

    async def wait_sent(self, count: int) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: len(self.sent) >= count), 5)


@pytest.fixture
async def api() -> AsyncIterator[AnthropicFaultServer]:
    async with AnthropicFaultServer() as server:
        yield server


def model_config(tmp_path: Path, api: AnthropicFaultServer, **sections: Any) -> Config:
    llm = {"base_url": api.base_url, "turn_deadline_seconds": 0.5, "timeout_s": 0.2}
    llm.update(sections.pop("llm", {}))
    config = make_config(tmp_path, llm=llm, **sections)
    return replace(config, secrets=Secrets({"ANTHROPIC_API_KEY": "test-key"}))


def real_app(config: Config, channel: MemoryChannel) -> App:
    return App(config=config, channels=[channel], clock=ManualClock())


async def answered(app: App, text: str, **where: Any) -> None:
    async with asyncio.timeout(GENEROUS_S):
        await app.router.submit(inbound(text, **where))


async def test_a_long_retry_after_is_an_apology_now_with_the_reason_logged_once(
    tmp_path: Path,
    api: AnthropicFaultServer,
    channel: MemoryChannel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api.rate_limited(retry_after=600)
    async with real_app(model_config(tmp_path, api), channel) as app:
        with caplog.at_level(logging.WARNING):
            await answered(app, "are you there?")
        saved = await app.vault.fetchall("SELECT text FROM messages WHERE role = 'user'")
    # Not "in a minute": the API said ten.
    assert channel.texts() == [MODEL_DOWN.format(when="in about 10 minutes")]
    assert [row[0] for row in saved] == ["are you there?"]
    reasons = [r.getMessage() for r in caplog.records if "HTTP 429" in r.getMessage()]
    assert len(reasons) == 1 and "rate limit" in reasons[0]


async def test_a_stalled_model_is_an_apology_at_the_deadline(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    api.stall(times=10)
    async with real_app(model_config(tmp_path, api), channel) as app:
        await answered(app, "hello?")
        await app.usage.flush()
        failed = await app.vault.scalar("SELECT count(*) FROM llm_calls WHERE ok = 0")
    assert channel.texts() == [MODEL_DOWN.format(when="in a minute")]
    assert failed == 1


async def test_other_purposes_get_the_same_bound(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    api.stall(times=10)
    gate = LLMRequest(system_stable="s", messages=(LLMMessage.user("x"),), purpose="gate")
    async with real_app(model_config(tmp_path, api), channel) as app:
        call_model = app.contributions.services.call_model  # what features are given
        with pytest.raises(ModelUnavailable):
            async with asyncio.timeout(GENEROUS_S):
                await call_model(gate, "memory:c1")


async def test_a_turn_waiting_on_the_model_holds_no_slot_other_chats_need(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    api.stall().text("hi B")
    config = model_config(
        tmp_path,
        api,
        llm={"turn_deadline_seconds": 60, "timeout_s": 50},
        router={"max_concurrency": 1},
    )
    async with real_app(config, channel) as app:
        slow = app.router.submit(inbound("slow", chat="A", user="a"))
        async with asyncio.timeout(GENEROUS_S):
            await api.wait_for_requests(1)
        await answered(app, "/help", chat="B", user="b")  # no model
        await answered(app, "quick", chat="B", user="b")  # the model answers at once
        assert not slow.done()
        api.release_stalled()
        async with asyncio.timeout(GENEROUS_S):
            await slow
    assert channel.texts()[1:] == ["hi B", "ok"]


class StalledLLM:
    """The model port, stalled until released: `calls` counts the requests that reached it."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.reached = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        self.reached.set()
        await self.release.wait()
        return LLMResponse(parts=(), stop_reason="end_turn", model="fake")


async def test_waiting_for_a_model_slot_counts_toward_the_deadline(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    llm = StalledLLM()
    async with App(config=config, channels=[], llm_override=llm, use_llm_override=True) as app:
        agent = Agent(
            llm=llm,
            model="m",
            pipeline=ContextPipeline(budget_tokens=1000, providers=[]),
            tools=ToolRegistry(),
            usage=UsageLog(app.vault),
            traces=TraceStore(),
            max_tokens=100,
            max_rounds=1,
            max_concurrency=1,
        )
        request = LLMRequest(system_stable="s", messages=(LLMMessage.user("x"),))
        first = asyncio.create_task(agent.call(request, None))
        await asyncio.wait_for(llm.reached.wait(), GENEROUS_S)
        with pytest.raises(ModelUnavailable):
            async with asyncio.timeout(GENEROUS_S):
                await agent.call(request, None, deadline_s=0.2)
        assert llm.calls == 1  # the second call never got a model slot
        # ... which is this gateway's queue, not the model failing: no streak towards
        # `/healthz` "degraded".
        assert agent.health.failed_in_a_row == 0
        llm.release.set()
        await asyncio.wait_for(first, GENEROUS_S)


async def health(app: App) -> tuple[int, dict[str, Any]]:
    assert app.http is not None
    url = f"http://127.0.0.1:{app.http.port}/healthz"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


async def test_an_admin_refused_by_the_model_is_told_how_to_fix_the_key(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    api.status(401).status(401)
    config = model_config(tmp_path, api, auth={"admins": ["memory:u1"], "allow": ["memory:*"]})
    async with real_app(config, channel) as app:
        await answered(app, "hello", user="u1")
        await answered(app, "hello", chat="c2", user="u2")
    assert channel.texts() == [KEY_REFUSED + KEY_REFUSED_ADMIN, KEY_REFUSED]
    assert "ANTHROPIC_API_KEY" in channel.texts()[0]


async def test_a_refused_key_is_a_health_problem_until_a_call_succeeds(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    api.status(401)
    config = model_config(tmp_path, api, http={"enabled": True, "port": 0})
    async with real_app(config, channel) as app:
        assert (await health(app))[0] == 200
        await answered(app, "hello")
        status, report = await health(app)
        assert status == 503 and report["ok"] is False
        assert report["problems"] == ["model: API key rejected"]
        await answered(app, "again")  # the key works again: the default answer
        status, report = await health(app)
    assert channel.texts() == [KEY_REFUSED, "ok"]
    assert status == 200 and report["problems"] == []


async def test_a_model_the_api_does_not_know_is_a_health_problem_until_a_call_succeeds(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    """A mistyped `[llm] model` (404) fails every turn, like a rejected key: `/healthz` says
    so and names the setting, where a passing failure would only count towards `degraded`."""
    api.status(404, times=2)
    config = model_config(tmp_path, api, http={"enabled": True, "port": 0})
    async with real_app(config, channel) as app:
        await answered(app, "hello")
        status, report = await health(app)
        assert status == 503 and report["ok"] is False
        [problem] = report["problems"]
        assert problem.startswith("model: the API does not know this model (HTTP 404)")
        assert "[llm] model" in problem
        await answered(app, "again")  # still refused: still one problem, not a run
        assert (await health(app))[1]["problems"] == [problem]
        await answered(app, "and now?")  # the model is known again: the default answer
        status, report = await health(app)
    assert channel.texts() == [MODEL_REFUSED, MODEL_REFUSED, "ok"]
    assert status == 200 and report["problems"] == []


async def test_refused_requests_count_towards_degraded(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    api.status(400, times=3)  # a request the API refuses for what it is: not a health problem
    config = model_config(tmp_path, api, http={"enabled": True, "port": 0})
    async with real_app(config, channel) as app:
        for n in range(3):
            await answered(app, f"hello {n}")
        status, report = await health(app)
    assert status == 200 and report["problems"] == []
    [line] = report["degraded"]
    assert line.startswith("model: the last 3 calls failed (since ")


async def test_a_run_of_failed_calls_is_degraded_in_health_until_one_succeeds(
    tmp_path: Path, api: AnthropicFaultServer, channel: MemoryChannel
) -> None:
    """A passing failure is no health problem (`ok` stays), but a run of them is visible:
    otherwise a probe sees nothing while every user gets the apology."""
    api.status(500, times=3)  # three turns, one request each (no retries)
    config = model_config(tmp_path, api, http={"enabled": True, "port": 0},
                          llm={"max_retries": 0})  # fmt: skip
    async with real_app(config, channel) as app:
        for n in range(2):
            await answered(app, f"hello {n}")
        status, report = await health(app)
        assert (status, report["degraded"]) == (200, [])  # two failures: not yet a run
        await answered(app, "hello 2")
        status, report = await health(app)
        assert status == 200 and report["ok"] is True
        [line] = report["degraded"]
        assert line.startswith("model: the last 3 calls failed (since ")
        await answered(app, "and now?")  # the model answers again
        status, report = await health(app)
    assert report["degraded"] == []


async def test_admins_are_told_once_per_episode_in_their_latest_direct_chat(
    tmp_path: Path, api: AnthropicFaultServer
) -> None:
    channel = WatchedChannel()
    config = model_config(
        tmp_path, api, auth={"admins": ["memory:boss", "memory:ghost"], "allow": ["memory:*"]}
    )
    api.text("hello boss").status(401, times=2).text("back").status(401)
    async with real_app(config, channel) as app:
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(stop))
        await asyncio.wait_for(channel.started.wait(), GENEROUS_S)
        await answered(app, "hi", chat="boss-dm", user="boss")
        await answered(app, "a", chat="c1", user="u1")  # 401: the episode starts
        await channel.wait_sent(3)
        await answered(app, "b", chat="c1", user="u1")  # 401 again: same episode
        await answered(app, "c", chat="c1", user="u1")  # answered: the episode ends
        await answered(app, "d", chat="c1", user="u1")  # 401: a new episode
        await channel.wait_sent(7)
        stop.set()
        await asyncio.wait_for(serving, GENEROUS_S)
    notices = [o for o in channel.sent if o.text == KEY_REJECTED_NOTICE]
    assert [o.chat for o in notices] == [ChatRef(channel="memory", chat_id="boss-dm")] * 2
    assert len({o.idempotency_key for o in notices}) == 2
    others = [o.text for o in channel.sent if o.text != KEY_REJECTED_NOTICE]
    # The users are told why, not to try again in a minute: that will not help.
    assert others == ["hello boss", KEY_REFUSED, KEY_REFUSED, "back", KEY_REFUSED]
