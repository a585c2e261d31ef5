"""The Anthropic adapter: our `LLMRequest` in, our `LLMResponse` out, our errors on failure.

The SDK (2.x, on httpx2) stays behind this module. Its exceptions are mapped to the gateway's
error tree here and nowhere else: rate limits, overloads, 5xx, timeouts, dropped connections
and unreadable bodies are `ModelUnavailable` (transient); a refused key (401) is
`ModelKeyRejected`; bad requests and everything else `ModelRejected`. Prompt caching marks the
stable prefix (tools, then the stable system block); the per-request system text comes after
the breakpoint so it never invalidates it.

Bounded time. The SDK's own retries are off (it obeys Retry-After with no cap: a 429 with
`Retry-After: 600` would hold a turn for ten minutes). `complete()` retries itself, inside the
request's deadline (`LLMRequest.deadline_s`, else `deadline_s`): each attempt gets at most
`timeout_s` (the stall timeout) and never more than what is left, transient failures back off
exponentially, and a wait the deadline cannot cover is not started — the call fails at once
with the reason. A Retry-After is honoured across calls: until it has passed, calls that
cannot wait it out fail fast without touching the API (it asked us not to), and calls that
can, wait. The start of such a hold is logged once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import Any

import anthropic

from gateway.core.errors import ModelKeyRejected, ModelRejected, ModelUnavailable
from gateway.core.llm import (
    LLMMessage,
    LLMRequest,
    LLMResponse,
    Part,
    TextPart,
    ToolCall,
    ToolSpec,
)

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
    """The `messages.create` body of a request (pure; unit-tested)."""
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


def encode_body(params: dict[str, Any]) -> bytes:
    """The request body as the SDK would send it, encoded once.

    `messages.create` first copies the whole request tree (to read file inputs we never send)
    and then encodes it, on every attempt: with a dozen tool schemas and the history that was
    about a third of the client's CPU per call. The body is plain JSON types, so it is encoded
    here, once, and posted as it is (`AsyncAnthropic.post`: the same headers, retries of ours,
    errors and response parsing as `messages.create`, whose timeout rule we never use since
    every call gives its own timeout).
    """
    return json.dumps(params, separators=(",", ":"), ensure_ascii=False).encode()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class BodyEncoder:
    """`encode_body(build_params(request, model))`, byte for byte, without re-encoding what
    repeats from call to call: the tool schemas (the registry hands out the same tuple for the
    same set), the stable system block and the history messages (the context pipeline reuses
    their immutable objects). Entries are keyed by identity and keep their object, so an id is
    never mistaken for a later object's; the message cache is cleared once it holds more than
    `limit_chars` of JSON.
    """

    def __init__(self, limit_chars: int = 2_000_000) -> None:
        self.limit_chars = limit_chars
        self._tools: dict[int, tuple[tuple[ToolSpec, ...], str]] = {}
        self._messages: dict[int, tuple[LLMMessage, str]] = {}
        self._chars = 0
        self._stable: tuple[str, str] = ("", "")

    def encode(self, request: LLMRequest, default_model: str) -> bytes:
        stable = self._stable
        if stable[0] != request.system_stable or not stable[1]:
            block = {"type": "text", "text": request.system_stable, "cache_control": _CACHE}
            stable = self._stable = (request.system_stable, _json(block))
        system = stable[1]
        if request.system_dynamic:
            system += "," + _json({"type": "text", "text": request.system_dynamic})
        model = _json(request.model or default_model)
        messages = ",".join(self._message(m) for m in request.messages)
        body = (
            f'{{"model":{model},"max_tokens":{request.max_tokens:d},"system":[{system}],'
            f'"messages":[{messages}]'
        )
        if request.tools:
            body += f',"tools":{self._tool_list(request.tools)}'
            if request.tool_choice:
                body += f',"tool_choice":{_json({"type": "tool", "name": request.tool_choice})}'
        return (body + "}").encode()

    def _message(self, message: LLMMessage) -> str:
        found = self._messages.get(id(message))
        if found is not None and found[0] is message:
            return found[1]
        text = _json(_message_to_wire(message))
        if self._chars > self.limit_chars:
            self._messages.clear()
            self._chars = 0
        self._messages[id(message)] = (message, text)
        self._chars += len(text)
        return text

    def _tool_list(self, tools: tuple[ToolSpec, ...]) -> str:
        found = self._tools.get(id(tools))
        if found is not None and found[0] is tools:
            return found[1]
        if len(self._tools) >= 64:
            self._tools.clear()
        wire = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in tools]  # fmt: skip
        wire[-1]["cache_control"] = _CACHE
        text = _json(wire)
        self._tools[id(tools)] = (tools, text)
        return text


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
        cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", None) or 0),
    )


def _error_type(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("type", ""))[:40]
    return ""


def map_error(exc: Exception) -> ModelUnavailable | ModelRejected:
    """Our error for an SDK error. Messages never include request content or keys."""
    if isinstance(exc, anthropic.APIConnectionError):  # includes APITimeoutError
        kind = "timeout" if isinstance(exc, anthropic.APITimeoutError) else "connection error"
        return ModelUnavailable(f"model API {kind}")
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        kind = _error_type(exc)
        detail = f"HTTP {status}, {kind}" if kind else f"HTTP {status}"
        if status == 401:
            return ModelKeyRejected(f"model API key rejected ({detail})")
        if status == 429:
            return ModelUnavailable(f"model API rate limit ({detail})")
        if status in _TRANSIENT_STATUS or status >= 500:
            return ModelUnavailable(f"model API unavailable ({detail})")
        return ModelRejected(f"model API rejected the request ({detail})", status=status)
    if isinstance(exc, anthropic.APIResponseValidationError | json.JSONDecodeError):
        return ModelUnavailable("model API sent an unreadable response")
    return ModelRejected(f"model API error ({type(exc).__name__})")


def _waiting(
    error: ModelUnavailable | ModelRejected, message: str, wait: float
) -> ModelUnavailable | ModelRejected:
    """`error` again with `message`, and the API's wait if it is an outage."""
    if isinstance(error, ModelUnavailable):
        return type(error)(message, retry_after_s=wait)
    return type(error)(message, status=error.status)


def retry_after_s(exc: Exception) -> float | None:
    """The wait the API asked for (`retry-after-ms` or `retry-after` in seconds), if any."""
    if not isinstance(exc, anthropic.APIStatusError):
        return None
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        if value >= 0:
            return value
    return None  # an HTTP date or nonsense: back off as usual


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, anthropic.APIStatusError):
        verdict = exc.response.headers.get("x-should-retry")
        if verdict in ("true", "false"):
            return verdict == "true"
        return exc.status_code in _TRANSIENT_STATUS or exc.status_code >= 500
    # A dropped connection, or a body that does not parse (a proxy's error page): try again.
    return isinstance(
        exc, anthropic.APIConnectionError | anthropic.APIResponseValidationError | ValueError
    )


class AnthropicLLM:
    """Implements the `LLM` port. Use as an async context manager to close its HTTP client."""

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str = "",
        timeout_s: float = 20.0,
        deadline_s: float = 30.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        http_client: Any = None,
    ) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._hold_until = 0.0  # time.monotonic(): calls wait (or fail) until then
        self._hold_reason = ""
        kwargs: dict[str, Any] = {"api_key": api_key, "timeout": timeout_s, "max_retries": 0}
        if base_url:
            kwargs["base_url"] = base_url
        if http_client is not None:
            kwargs["http_client"] = http_client
        self._client = anthropic.AsyncAnthropic(**kwargs)
        self._encoder = BodyEncoder()

    async def __aenter__(self) -> AnthropicLLM:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        body = self._encoder.encode(request, self.model)
        deadline_s = self.deadline_s if request.deadline_s is None else request.deadline_s
        ends = time.monotonic() + deadline_s
        attempt = 0
        while True:
            await self._wait_for_hold(ends)
            left = ends - time.monotonic()
            if left <= 0:
                raise ModelUnavailable(f"no answer from the model API within {deadline_s:.3g} s")
            try:
                message = await self._client.post(
                    "/v1/messages",
                    cast_to=anthropic.types.Message,
                    content=body,
                    options={"timeout": min(self.timeout_s, left)},
                )
            except (anthropic.AnthropicError, json.JSONDecodeError) as exc:
                error = map_error(exc)
                wait = retry_after_s(exc)
                if not _retryable(exc):
                    raise error from exc
                if wait is not None:
                    error = _waiting(error, f"{error}, Retry-After {wait:.3g} s", wait)
                    self._hold(wait, str(error))
                if attempt >= self.max_retries:
                    raise error from exc
                if wait is None:
                    wait = self.backoff_s * 2**attempt * random.uniform(0.75, 1.0)
                if time.monotonic() + wait >= ends:
                    late = f"waiting {wait:.3g} s would pass the deadline ({deadline_s:.3g} s)"
                    raise _waiting(error, f"{error}; {late}", wait) from exc
                await asyncio.sleep(wait)
                attempt += 1
                continue
            try:
                return parse_response(message)
            except (AttributeError, TypeError, ValueError) as exc:  # JSON of another shape
                raise ModelUnavailable("model API sent an unreadable response") from exc

    def _hold(self, wait: float, reason: str) -> None:
        if wait <= 0:
            return
        now = time.monotonic()
        if self._hold_until <= now:  # the callers log their failures; this is the why
            log.info("%s: model calls wait or fail fast for the next %.3g s", reason, wait)
        self._hold_until = max(self._hold_until, now + wait)
        self._hold_reason = reason

    async def _wait_for_hold(self, ends: float) -> None:
        now = time.monotonic()
        if self._hold_until <= now:
            return
        if self._hold_until >= ends:
            left = self._hold_until - now
            raise ModelUnavailable(
                f"{self._hold_reason}: the API asked to wait {left:.0f} s more", retry_after_s=left
            )
        await asyncio.sleep(self._hold_until - now)
