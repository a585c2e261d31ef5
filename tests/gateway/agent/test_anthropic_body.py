"""The request body the Anthropic adapter posts: encoded with its repeating parts cached, and
still byte for byte what the plain encoding of `build_params` gives."""

from __future__ import annotations

import json

from gateway.agent.anthropic_llm import BodyEncoder, build_params, encode_body
from gateway.core.llm import LLMMessage, LLMRequest, TextPart, ToolCall, ToolResult, ToolSpec

TOOLS = (
    ToolSpec("remember", "Keep a fact — «quoted» too.", {"type": "object", "properties": {}}),
    ToolSpec(
        "forget", "Drop a fact.", {"type": "object", "properties": {"id": {"type": "string"}}}
    ),
)


def _request(messages: tuple[LLMMessage, ...], **kw: object) -> LLMRequest:
    return LLMRequest(system_stable="You are Iris.", messages=messages, **kw)  # type: ignore[arg-type]


def test_the_cached_encoding_is_the_plain_one_byte_for_byte() -> None:
    encoder = BodyEncoder()
    history = (LLMMessage.user("hi"), LLMMessage.assistant("hello ✓"))
    turn = LLMMessage("assistant", (TextPart("let me"), ToolCall("t1", "remember", {"fact": "x"})))
    result = LLMMessage("user", (ToolResult("t1", "done", is_error=False),))
    requests = [
        _request(history),
        _request((*history, LLMMessage.user("again")), tools=TOOLS, system_dynamic="now: 9:00"),
        _request((*history, turn, result), tools=TOOLS),  # the same objects: cache hits
        _request(history, tools=TOOLS[:1], tool_choice="remember", model="other", max_tokens=9),
        LLMRequest(system_stable="Changed.", messages=history, tools=TOOLS),
    ]
    for request in requests:
        for _ in range(2):
            got = encoder.encode(request, "default-model")
            assert got == encode_body(build_params(request, "default-model"))
            json.loads(got)


def test_a_full_message_cache_starts_over() -> None:
    encoder = BodyEncoder(limit_chars=10)
    for n in range(5):
        request = _request((LLMMessage.user(f"message {n} " * 5),), tools=TOOLS)
        assert encoder.encode(request, "m") == encode_body(build_params(request, "m"))
    assert len(encoder._messages) <= 2
