"""The real Anthropic adapter against a loopback fault server: every fault ends in one of our
errors, inside the deadline, with retries where they help and none where they cannot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.agent.anthropic_llm import AnthropicLLM
from gateway.core.errors import ModelKeyRejected, ModelRejected, ModelUnavailable
from gateway.core.llm import LLMMessage, LLMRequest
from tests.fakes.anthropic_server import AnthropicFaultServer

REQUEST = LLMRequest(system_stable="s", messages=(LLMMessage.user("hello"),))
GENEROUS_S = 10  # the test's own bound: every call below must end well before it


@pytest.fixture
async def api() -> AsyncIterator[AnthropicFaultServer]:
    async with AnthropicFaultServer() as server:
        yield server


def adapter(api: AnthropicFaultServer, *, retries: int = 2, deadline: float = 0.5) -> AnthropicLLM:
    return AnthropicLLM(
        api_key="test-key",
        model="claude-test",
        base_url=api.base_url,
        timeout_s=0.2,
        deadline_s=deadline,
        max_retries=retries,
        backoff_s=0,
    )


async def complete(llm: AnthropicLLM, request: LLMRequest = REQUEST) -> str:
    async with asyncio.timeout(GENEROUS_S):
        return (await llm.complete(request)).text


async def test_a_long_retry_after_fails_at_once_and_holds_later_calls(
    api: AnthropicFaultServer,
) -> None:
    api.rate_limited(retry_after=600).text("never asked")
    async with adapter(api) as llm:
        with pytest.raises(ModelUnavailable) as first:
            await complete(llm)
        with pytest.raises(ModelUnavailable) as second:
            await complete(llm)  # the API asked for 600 s: it is not asked again meanwhile
    assert "rate limit (HTTP 429, rate_limit_error)" in str(first.value)
    assert "600 s" in str(first.value) and "rate limit" in str(second.value)
    assert len(api.requests) == 1


async def test_a_retry_after_that_fits_is_waited_out(api: AnthropicFaultServer) -> None:
    api.rate_limited(retry_after=0.01).text("after the wait")
    async with adapter(api) as llm:
        assert await complete(llm) == "after the wait"
    assert len(api.requests) == 2


async def test_a_stalled_model_ends_at_the_deadline(api: AnthropicFaultServer) -> None:
    api.stall(times=5)
    async with adapter(api) as llm:
        with pytest.raises(ModelUnavailable, match=r"timeout|deadline"):
            await complete(llm)
    assert 1 <= len(api.requests) <= 3  # a retry only when it fits in what is left


# Faults after which the request may be retried: each queues one failing answer.
TRANSIENT_FAULTS = pytest.mark.parametrize(
    "fault",
    [
        lambda api: api.status(500),
        lambda api: api.status(529),
        lambda api: api.reset(),
        lambda api: api.truncated(),
        lambda api: api.garbage(),
    ],
    ids=["500", "529", "reset", "truncated", "garbage"],
)


async def test_a_request_deadline_overrides_the_adapters(api: AnthropicFaultServer) -> None:
    api.stall(times=5)
    async with adapter(api, deadline=300) as llm:
        with pytest.raises(ModelUnavailable):
            await complete(llm, LLMRequest(system_stable="s", messages=(), deadline_s=0.3))


@TRANSIENT_FAULTS
async def test_transient_faults_are_retried(
    api: AnthropicFaultServer, fault: Callable[[AnthropicFaultServer], object]
) -> None:
    fault(api)
    api.text("recovered")
    async with adapter(api) as llm:
        assert await complete(llm) == "recovered"
    assert len(api.requests) == 2


@TRANSIENT_FAULTS
async def test_transient_faults_without_retries_are_unavailable(
    api: AnthropicFaultServer, fault: Callable[[AnthropicFaultServer], object]
) -> None:
    fault(api)
    async with adapter(api, retries=0) as llm:
        with pytest.raises(ModelUnavailable):
            await complete(llm)


async def test_a_refused_key_is_its_own_error_and_never_retried(
    api: AnthropicFaultServer,
) -> None:
    api.status(401)
    async with adapter(api) as llm:
        with pytest.raises(ModelKeyRejected, match="key rejected"):
            await complete(llm)
    assert len(api.requests) == 1


async def test_a_bad_request_is_rejected_and_never_retried(api: AnthropicFaultServer) -> None:
    api.status(400)
    async with adapter(api) as llm:
        with pytest.raises(ModelRejected):
            await complete(llm)
    assert len(api.requests) == 1


async def test_json_of_another_shape_is_unavailable_not_a_crash() -> None:
    from tests.fakes import FakeAnthropicAPI

    api = FakeAnthropicAPI()
    api.queue.append((200, {"unexpected": True}))
    async with api.adapter() as llm:
        with pytest.raises(ModelUnavailable, match="unreadable"):
            await complete(llm)
