"""Fakes at each seam: the model (port level and HTTP level), an in-memory channel, app wiring.

- `FakeLLM` implements the `LLM` port with a queue of replies: `enqueue_text`, `enqueue_tool`,
  `enqueue_error`. `requests` holds what the code under test sent.
- `FakeAnthropicAPI` is the Anthropic Messages API behind `httpx2.MockTransport`, driving the
  real `AnthropicLLM` adapter (respx cannot see anthropic 2.x's httpx2).
- `MemoryChannel` is a channel that records what it was asked to send and can fail on cue.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2

from gateway.agent.anthropic_llm import AnthropicLLM
from gateway.core.clock import ManualClock
from gateway.core.errors import DeliveryError, ModelUnavailable
from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolCall
from gateway.core.messages import ChatKind, ChatRef, Inbound, Outbound, SentReceipt, UserRef
from gateway.core.ports import InboundHandler

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


@dataclass
class MemoryChannel:
    """An in-memory channel. `fail_with` is consumed one error per send."""

    name: str = "memory"
    sent: list[Outbound] = field(default_factory=list)
    fail_with: deque[DeliveryError | Exception] = field(default_factory=deque)
    typing_calls: int = 0
    handler: InboundHandler | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def command_hint(self, command: str) -> str:
        return f"/{command}"

    async def typing(self, chat: ChatRef) -> None:
        self.typing_calls += 1

    async def send(self, out: Outbound) -> SentReceipt:
        if self.fail_with:
            raise self.fail_with.popleft()
        self.sent.append(out)
        return SentReceipt(platform_message_ids=(f"p{len(self.sent)}",))

    async def run(self, on_inbound: InboundHandler) -> None:
        self.handler = on_inbound
        self.started.set()
        await asyncio.Event().wait()

    def texts(self) -> list[str]:
        return [o.text for o in self.sent]


def inbound(
    text: str,
    *,
    chat: str = "c1",
    user: str = "u1",
    channel: str = "memory",
    message_id: str | None = None,
    kind: ChatKind = ChatKind.DM,
    mentioned: bool = False,
    thread: str | None = None,
) -> Inbound:
    return Inbound(
        chat=ChatRef(channel=channel, chat_id=chat, thread_id=thread),
        user=UserRef(channel=channel, user_id=user),
        text=text,
        message_id=message_id or f"m{next(_ids)}",
        kind=kind,
        mentioned=mentioned,
    )


async def run_clock_until(clock: ManualClock, done: Callable[[], bool]) -> None:
    """Let the loop run; whenever everything waits on the manual clock, jump to the next
    wake-up. For code that backs off or polls on the clock (delivery, supervisors)."""
    while not done():
        await asyncio.sleep(0)
        wake = clock.next_wakeup_ms()
        if wake is not None:
            clock.set(wake)


class Inbox:
    """An `on_inbound` handler that keeps what a channel hands over; `wait(n)` for n of them."""

    def __init__(self) -> None:
        self.items: list[Inbound] = []
        self.arrived = asyncio.Condition()

    async def __call__(self, inbound: Inbound) -> None:
        async with self.arrived:
            self.items.append(inbound)
            self.arrived.notify_all()

    async def wait(self, count: int) -> list[Inbound]:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.items) >= count), 5)
        return self.items
