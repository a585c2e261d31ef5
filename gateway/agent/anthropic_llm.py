"""The Anthropic adapter: our `LLMRequest` in, our `LLMResponse` out, our errors on failure.

The SDK (2.x, on httpx2) stays behind this module. Its exceptions are mapped to the gateway's
error tree here and nowhere else: rate limits, overloads, 5xx, timeouts and connection errors
are `ModelUnavailable` (transient); auth, bad requests and everything else `ModelRejected`.
`max_retries` is kept low because the SDK obeys Retry-After without a cap, which would freeze
an interactive turn. Prompt caching marks the stable prefix (tools, then the stable system
block); the per-request system text comes after the breakpoint so it never invalidates it.
"""

from __future__ import annotations

import logging
from typing import Any

import anthropic

from gateway.core.errors import ModelRejected, ModelUnavailable
from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse, Part, TextPart, ToolCall

log = logging.getLogger(__name__)

_CACHE = {"type": "ephemeral"}
_TRANSIENT_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}


def _part_to_wire(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ToolCall):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": part.input}
    return {
        "type": "tool_result",
        "tool_use_id": part.tool_use_id,
        "content": part.content,
        "is_error": part.is_error,
    }


def _message_to_wire(message: LLMMessage) -> dict[str, Any]:
    return {"role": message.role, "content": [_part_to_wire(p) for p in message.parts]}


def build_params(request: LLMRequest, default_model: str) -> dict[str, Any]:
    """The `messages.create` keyword arguments for a request (pure; unit-tested)."""
    system: list[dict[str, Any]] = [
        {"type": "text", "text": request.system_stable, "cache_control": _CACHE}
    ]
    if request.system_dynamic:
        system.append({"type": "text", "text": request.system_dynamic})
    params: dict[str, Any] = {
        "model": request.model or default_model,
        "max_tokens": request.max_tokens,
        "system": system,
        "messages": [_message_to_wire(m) for m in request.messages],
    }
    if request.tools:
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        tools[-1]["cache_control"] = _CACHE
        params["tools"] = tools
        if request.tool_choice:
            params["tool_choice"] = {"type": "tool", "name": request.tool_choice}
    return params


def parse_response(message: Any) -> LLMResponse:
    parts: list[Part] = []
    for block in message.content:
        if block.type == "text":
            parts.append(TextPart(block.text))
        elif block.type == "tool_use":
            parts.append(ToolCall(block.id, block.name, dict(block.input or {})))
    usage = message.usage
    return LLMResponse(
        parts=tuple(parts),
        stop_reason=str(message.stop_reason or "end_turn"),
        model=str(message.model),
        input_tokens=int(usage.input_tokens or 0),
        output_tokens=int(usage.output_tokens or 0),
        cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", None) or 0),
    )


def map_error(exc: anthropic.AnthropicError) -> Exception:
    """Our error for an SDK error. Messages never include request content or keys."""
    if isinstance(exc, anthropic.APIConnectionError):  # includes APITimeoutError
        kind = "timeout" if isinstance(exc, anthropic.APITimeoutError) else "connection error"
        return ModelUnavailable(f"model API {kind}")
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status in _TRANSIENT_STATUS or status >= 500:
            return ModelUnavailable(f"model API unavailable (HTTP {status})")
        return ModelRejected(f"model API rejected the request (HTTP {status})")
    return ModelRejected(f"model API error ({type(exc).__name__})")


class AnthropicLLM:
    """Implements the `LLM` port. Use as an async context manager to close its HTTP client."""

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str = "",
        timeout_s: float = 60.0,
        max_retries: int = 1,
        http_client: Any = None,
    ) -> None:
        self.model = model
        kwargs: dict[str, Any] = {
            "api_key": api_key,
            "timeout": timeout_s,
            "max_retries": max_retries,
        }
        if base_url:
            kwargs["base_url"] = base_url
        if http_client is not None:
            kwargs["http_client"] = http_client
        self._client = anthropic.AsyncAnthropic(**kwargs)

    async def __aenter__(self) -> AnthropicLLM:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        params = build_params(request, self.model)
        try:
            message = await self._client.messages.create(**params)
        except anthropic.AnthropicError as exc:
            raise map_error(exc) from exc
        return parse_response(message)
