"""The tool loop and the Anthropic adapter, driven through the SDK's own HTTP layer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import httpx2
import pytest

from gateway.agent.agent import CUT_SHORT_NOTE, REFUSAL_TEXT, TOO_MANY_ROUNDS
from gateway.agent.anthropic_llm import map_error
from gateway.app.app import App
from gateway.core.errors import ModelRejected, ModelUnavailable
from gateway.turns.router import MODEL_DOWN
from tests.conftest import app_with, make_config
from tests.fakes import FakeAnthropicAPI, MemoryChannel, inbound


@pytest.fixture
def api() -> FakeAnthropicAPI:
    return FakeAnthropicAPI()


@pytest.fixture
async def real_app(
    tmp_path: Path, api: FakeAnthropicAPI, channel: MemoryChannel
) -> AsyncIterator[App]:
    config = make_config(tmp_path, llm={"max_tool_rounds": 3})
    async with (
        api.adapter() as llm,
        app_with(config, channel, llm) as app,
    ):
        yield app


async def test_tool_loop_remembers_then_answers(
    real_app: App, api: FakeAnthropicAPI, channel: MemoryChannel
) -> None:
    api.tool_use("memory_remember", {"text": "prefers tea"}).text("Noted: tea.")
    await real_app.router.submit(inbound("I prefer tea"))
    assert channel.texts() == ["Noted: tea."]
    second = api.bodies[1]["messages"]
    assert second[-2]["content"][0]["type"] == "tool_use"
    result = second[-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is False
    assert result["tool_use_id"] == second[-2]["content"][0]["id"]
    memories = await real_app.vault.fetchall("SELECT text FROM memories")
    assert [m[0] for m in memories] == ["prefers tea"]


async def test_unknown_tool_and_bad_arguments_are_reported_as_errors(
    real_app: App, api: FakeAnthropicAPI, channel: MemoryChannel
) -> None:
    api.tool_use("launch_rockets", {}).tool_use("memory_forget", {"id": "x"}).text("sorry")
    await real_app.router.submit(inbound("do it"))
    first = api.bodies[1]["messages"][-1]["content"][0]
    second = api.bodies[2]["messages"][-1]["content"][0]
    assert first["is_error"] and "unknown tool" in first["content"]
    assert second["is_error"] and "invalid arguments" in second["content"]
    assert channel.texts() == ["sorry"]


async def test_forgetting_another_users_memory_fails(real_app: App, api: FakeAnthropicAPI) -> None:
    api.tool_use("memory_remember", {"text": "u1 secret"}).text("ok")
    await real_app.router.submit(inbound("remember", user="u1", chat="c1"))
    memory_id = await real_app.vault.scalar("SELECT id FROM memories")
    api.tool_use("memory_forget", {"id": memory_id}).text("done")
    await real_app.router.submit(inbound("forget it", user="u2", chat="c2"))
    result = api.bodies[-1]["messages"][-1]["content"][0]
    assert result["is_error"]
    assert await real_app.vault.scalar("SELECT count(*) FROM memories") == 1


async def test_stop_reasons(real_app: App, api: FakeAnthropicAPI, channel: MemoryChannel) -> None:
    api.text("partial", stop_reason="max_tokens")
    api.text("", stop_reason="refusal")
    api.text("thinking", stop_reason="pause_turn").text("resumed")
    for text in ("a", "b", "c"):
        await real_app.router.submit(inbound(text))
    assert channel.texts() == ["partial" + CUT_SHORT_NOTE, REFUSAL_TEXT, "resumed"]


async def test_tool_rounds_are_capped(
    real_app: App, api: FakeAnthropicAPI, channel: MemoryChannel
) -> None:
    for _ in range(5):
        api.tool_use("memory_search", {"query": "x"})
    await real_app.router.submit(inbound("loop forever"))
    assert channel.texts() == [TOO_MANY_ROUNDS]
    assert len(api.bodies) == 3


async def test_request_shape_caching_and_headers(real_app: App, api: FakeAnthropicAPI) -> None:
    api.text("hi")
    await real_app.router.submit(inbound("hello"))
    body, headers = api.bodies[0], api.headers[0]
    assert headers["authorization"] == "Bearer test-key"
    assert body["model"] == "claude-test"
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["system"][1]  # per-request text after the breakpoint
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert {t["name"] for t in body["tools"]} == {
        "context_status",
        "memory_remember",
        "memory_search",
        "memory_forget",
        "proactive_intent",
        "proactive_cancel",
        "proactive_list",
        "proactive_quota",
        "proactive_engage",
    }  # no documents, no memories: nothing the suggestion tools could find is offered
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]


@pytest.mark.parametrize("status", [429, 529, 500, 503])
async def test_transient_statuses_become_an_apology(
    real_app: App, api: FakeAnthropicAPI, channel: MemoryChannel, status: int
) -> None:
    api.status(status)
    await real_app.router.submit(inbound("hi"))
    assert channel.texts() == [MODEL_DOWN.format(when="in a minute")]
    await real_app.usage.flush()
    ok = await real_app.vault.scalar("SELECT ok FROM llm_calls")
    assert ok == 0


async def test_timeouts_and_connection_errors_map_to_unavailable(api: FakeAnthropicAPI) -> None:
    from gateway.core.llm import LLMMessage, LLMRequest

    request = LLMRequest(system_stable="s", messages=(LLMMessage.user("x"),))
    api.raise_exc(httpx2.ConnectTimeout("slow")).raise_exc(httpx2.ConnectError("refused"))
    async with api.adapter() as llm:
        for _ in range(2):
            with pytest.raises(ModelUnavailable):
                await llm.complete(request)


@pytest.mark.parametrize("status", [400, 403, 404])
async def test_definite_statuses_map_to_rejected(api: FakeAnthropicAPI, status: int) -> None:
    from gateway.core.llm import LLMMessage, LLMRequest

    api.status(status)
    async with api.adapter() as llm:
        with pytest.raises(ModelRejected) as info:
            await llm.complete(LLMRequest(system_stable="s", messages=(LLMMessage.user("x"),)))
    assert str(status) in str(info.value)


def test_map_error_never_leaks_the_message() -> None:
    request = httpx2.Request("POST", "https://api.example/v1/messages")
    exc = anthropic.BadRequestError(
        "prompt contained sk-secret", response=httpx2.Response(400, request=request), body=None
    )
    assert "sk-secret" not in str(map_error(exc))


async def test_remembering_the_same_fact_twice_keeps_one(
    real_app: App, api: FakeAnthropicAPI
) -> None:
    for _ in range(2):
        api.tool_use("memory_remember", {"text": "prefers tea"}).text("ok")
        await real_app.router.submit(inbound("I prefer tea"))
    assert (
        "already remembered as memory #1" in api.bodies[-1]["messages"][-1]["content"][0]["content"]
    )
    assert await real_app.vault.scalar("SELECT count(*) FROM memories") == 1
