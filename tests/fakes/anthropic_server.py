"""A fault server for the Anthropic Messages API on 127.0.0.1: the real SDK talks to it over
real sockets (`base_url`), so retries, timeouts, Retry-After and broken connections are
exercised end to end — what `FakeAnthropicAPI`'s MockTransport cannot do.

Script the answers in order; each method takes `times` (default 1), and an empty script
answers `default_text`:

    async with AnthropicFaultServer() as api:
        api.rate_limited(retry_after=600).stall(times=3).status(401).text("hi")
        llm = AnthropicLLM(api_key="k", model="m", base_url=api.base_url, ...)

Faults: `status(code, retry_after=…)` (429 as `rate_limit_error`, 529 `overloaded_error`, 401
`authentication_error`, …), `rate_limited(retry_after)`, `stall()` (reads the request and
answers nothing until `release_stalled()` or the server closes; then `default_text`, to
whoever still listens), `reset()` (drops the connection without a response),
`truncated()` (promises a body and closes halfway through it), `garbage()` (200 with a body
that is not JSON). `requests` holds every JSON body received; `received` is a condition
notified after each one, for tests that wait until a call has arrived.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from tests.fakes.llm import message_body

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class Fault(StrEnum):
    TEXT = "text"
    STATUS = "status"
    STALL = "stall"
    RESET = "reset"
    TRUNCATED = "truncated"
    GARBAGE = "garbage"


@dataclass(frozen=True, slots=True)
class Answer:
    fault: Fault
    text: str = ""
    status: int = 200
    retry_after: float | None = None


class AnthropicFaultServer:
    def __init__(self, default_text: str = "ok") -> None:
        self.default_text = default_text
        self.script: deque[Answer] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.received = asyncio.Condition()
        self._unstall = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # -- scripting ---------------------------------------------------------------------------

    def _add(self, answer: Answer, times: int) -> Self:
        self.script.extend(itertools.repeat(answer, times))
        return self

    def text(self, text: str, *, times: int = 1) -> Self:
        return self._add(Answer(Fault.TEXT, text=text), times)

    def status(self, code: int, *, retry_after: float | None = None, times: int = 1) -> Self:
        return self._add(Answer(Fault.STATUS, status=code, retry_after=retry_after), times)

    def rate_limited(self, retry_after: float = 600, *, times: int = 1) -> Self:
        return self.status(429, retry_after=retry_after, times=times)

    def stall(self, *, times: int = 1) -> Self:
        return self._add(Answer(Fault.STALL), times)

    def reset(self, *, times: int = 1) -> Self:
        return self._add(Answer(Fault.RESET), times)

    def truncated(self, *, times: int = 1) -> Self:
        return self._add(Answer(Fault.TRUNCATED), times)

    def garbage(self, *, times: int = 1) -> Self:
        return self._add(Answer(Fault.GARBAGE), times)

    def release_stalled(self) -> None:
        """Let every stalled request (and any later `stall()`) answer `default_text`."""
        self._unstall.set()

    async def wait_for_requests(self, count: int) -> None:
        """Until at least `count` requests have arrived (callers bound it with a timeout)."""
        async with self.received:
            await self.received.wait_for(lambda: len(self.requests) >= count)

    # -- serving -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        port = int(runner.addresses[0][1])
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._unstall.set()  # stalled handlers return, so the runner closes at once
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        answer = self.script.popleft() if self.script else Answer(Fault.TEXT, self.default_text)
        async with self.received:
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            self.received.notify_all()
        if answer.fault is Fault.TEXT:
            return web.json_response(message_body([{"type": "text", "text": answer.text}]))
        if answer.fault is Fault.STATUS:
            return _error(answer.status, answer.retry_after)
        if answer.fault is Fault.STALL:
            await self._unstall.wait()
            return web.json_response(message_body([{"type": "text", "text": self.default_text}]))
        if answer.fault is Fault.GARBAGE:
            return web.Response(
                status=200, text="<html>proxy error", content_type="application/json"
            )
        if answer.fault is Fault.RESET:
            _drop(request)
            return web.Response(status=500)  # never written: the connection is gone
        payload = json.dumps(message_body([{"type": "text", "text": "cut"}])).encode()
        response = web.StreamResponse(headers={"content-type": "application/json"})
        response.content_length = len(payload)
        await response.prepare(request)
        await response.write(payload[: len(payload) // 2])
        _drop(request)
        return response


def _error(status: int, retry_after: float | None) -> web.Response:
    kind = _ERROR_TYPES.get(status, "api_error")
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    body = {"type": "error", "error": {"type": kind, "message": f"fault server: {kind}"}}
    return web.json_response(body, status=status, headers=headers)


def _drop(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()
