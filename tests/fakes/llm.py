"""The model seam: `FakeLLM` implements the `LLM` port with a queue of replies
(`enqueue_text`, `enqueue_tool`, `enqueue_error`; `requests` holds what the code under test
sent). `FakeAnthropicAPI` is the Anthropic Messages API behind `httpx2.MockTransport`, driving
the real `AnthropicLLM` adapter (respx cannot see anthropic 2.x's httpx2)."""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2

from gateway.agent.anthropic_llm import AnthropicLLM
from gateway.core.errors import ModelUnavailable
from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolCall

_ids = itertools.count(1)


class FakeLLM:
    """The `LLM` port with queued replies. An empty queue answers "ok"."""

    def __init__(self, default: str = "ok") -> None:
        self.replies: deque[LLMResponse | Exception | Callable[[LLMRequest], LLMResponse]] = deque()
        self.requests: list[LLMRequest] = []
        self.default = default

    def enqueue_text(self, text: str, stop_reason: str = "end_turn") -> FakeLLM:
        self.replies.append(
            LLMResponse(
                parts=(TextPart(text),),
                stop_reason=stop_reason,
                model="fake",
                input_tokens=10,
                output_tokens=5,
            )
        )
        return self

    def enqueue_tool(self, name: str, args: dict[str, Any], text: str = "") -> FakeLLM:
        parts: tuple[TextPart | ToolCall, ...] = (ToolCall(f"toolu_{next(_ids)}", name, args),)
        if text:
            parts = (TextPart(text), *parts)
        self.replies.append(
            LLMResponse(
                parts=parts, stop_reason="tool_use", model="fake", input_tokens=10, output_tokens=5
            )
        )
        return self

    def enqueue_error(self, exc: Exception | None = None) -> FakeLLM:
        self.replies.append(exc or ModelUnavailable("model API unavailable (HTTP 529)"))
        return self

    def enqueue_fn(self, fn: Callable[[LLMRequest], LLMResponse]) -> FakeLLM:
        self.replies.append(fn)
        return self

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        if not self.replies:
            return LLMResponse(
                parts=(TextPart(self.default),), stop_reason="end_turn", model="fake"
            )
        reply = self.replies.popleft()
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            return reply(request)
        return reply


def message_body(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 7},
    }


class FakeAnthropicAPI:
    """The Messages API on an httpx2 MockTransport: queue (status, body) pairs."""

    def __init__(self) -> None:
        self.queue: deque[tuple[int, dict[str, Any]] | Exception] = deque()
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    def text(self, text: str, stop_reason: str = "end_turn") -> FakeAnthropicAPI:
        self.queue.append((200, message_body([{"type": "text", "text": text}], stop_reason)))
        return self

    def tool_use(self, name: str, args: dict[str, Any]) -> FakeAnthropicAPI:
        block = {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": args}
        self.queue.append((200, message_body([block], "tool_use")))
        return self

    def status(self, code: int, message: str = "error") -> FakeAnthropicAPI:
        kind = {
            429: "rate_limit_error",
            529: "overloaded_error",
            401: "authentication_error",
            400: "invalid_request_error",
        }.get(code, "api_error")
        self.queue.append((code, {"type": "error", "error": {"type": kind, "message": message}}))
        return self

    def raise_exc(self, exc: Exception) -> FakeAnthropicAPI:
        self.queue.append(exc)
        return self

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        self.headers.append(dict(request.headers))
        if not self.queue:
            return httpx2.Response(200, json=message_body([{"type": "text", "text": "ok"}]))
        item = self.queue.popleft()
        if isinstance(item, Exception):
            raise item
        status, body = item
        return httpx2.Response(status, json=body)

    def adapter(self, model: str = "claude-test") -> AnthropicLLM:
        client = anthropic.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(self.handler))
        return AnthropicLLM(api_key="test-key", model=model, max_retries=0, http_client=client)
