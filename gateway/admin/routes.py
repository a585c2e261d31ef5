"""The features' `ApiRoute`s on the admin API: path parameters and the query validated into an
`ApiCall` (422 with field errors, like bodies), JSON answers through the API's one endpoint
wrapper (auth, error mapping, audit), and server-sent event streams.

A stream is opened only after the request is authorized and validated and the feature's
`stream(call)` accepted it (a 404 is still a JSON error); then events are written as they come,
and a client that goes away ends the stream at the next write (a keep-alive comment at the
latest) and closes the feature's generator, so nothing it holds outlives the connection. When
the server stops, open streams end at once (`STOPPING`) instead of holding the shutdown up.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel, ValidationError

from gateway.admin.bodies import ApiError
from gateway.admin.http import STOPPING
from gateway.core.admin_ops import JSON
from gateway.core.errors import NotFound, UserInputError, WrongState
from gateway.features.contributions import ApiCall, ApiRoute, EventStream, StreamEvent
from vault.audit import Outcome

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ErrorResponse = Callable[[int, str, Any], web.Response]


class Endpoint(Protocol):
    def __call__(
        self,
        action: str,
        model: type[BaseModel] | None,
        op: Callable[[web.Request, Any], Awaitable[JSON]],
        *,
        audited: bool = True,
        ok_status: int = 200,
    ) -> Handler: ...


Record = Callable[[str, Any, Outcome, str], Awaitable[None]]


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    return [
        {"field": ".".join(str(p) for p in e["loc"]) or "query", "message": e["msg"]}
        for e in exc.errors(include_url=False)
    ]


def _params(route: ApiRoute, request: web.Request) -> dict[str, str]:
    found: dict[str, str] = {}
    errors = []
    for name, pattern in route.params.items():
        value = request.match_info.get(name, "")
        if re.fullmatch(pattern, value) is None:
            errors.append({"field": name, "message": f"must match {pattern}"})
        found[name] = value
    if errors:
        raise ApiError(422, "invalid request", errors)
    return found


def _query(route: ApiRoute, request: web.Request) -> BaseModel | None:
    if route.query is None:
        return None
    try:
        return route.query.model_validate(dict(request.query), strict=True)
    except ValidationError as exc:
        raise ApiError(422, "invalid request", field_errors(exc)) from None


def _call(route: ApiRoute, request: web.Request, body: BaseModel | None) -> ApiCall:
    params = _params(route, request)
    return ApiCall(params=params, query=_query(route, request), body=body, headers=request.headers)


class _End:
    pass


async def _next(events: EventStream, stopping: asyncio.Event) -> StreamEvent | _End | None:
    """The stream's next item, or `_End` once it is exhausted or the server is stopping."""
    item = asyncio.ensure_future(anext(events))
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({item, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not item.done():
            item.cancel()
            await asyncio.wait({item})  # let the generator run its cleanup
    if item.cancelled() or isinstance(item.exception(), StopAsyncIteration):
        return _End()
    return item.result()


def route_handler(
    route: ApiRoute,
    *,
    authorized: Callable[[web.Request], bool],
    endpoint: Endpoint,
    record: Record,
    error: ErrorResponse,
) -> Handler:
    action = f"{route.method.lower()} {route.path.strip('/')}"
    handler, stream = route.handler, route.stream
    if stream is None:
        assert handler is not None, f"{route.path}: an ApiRoute needs a handler or a stream"

        async def op(request: web.Request, body: BaseModel | None) -> JSON:
            return await handler(_call(route, request, body))

        audited = route.method != "GET"  # reads are not audited (a poll would flood it)
        return endpoint(action, route.body, op, audited=audited, ok_status=route.status)

    async def handle(request: web.Request) -> web.StreamResponse:
        if not authorized(request):
            return error(401, "unauthorized", "send Authorization: Bearer <IRIS_API_TOKEN>")
        try:
            events = await stream(_call(route, request, None))
        except ApiError as exc:
            return error(exc.status, exc.error, exc.detail)
        except (NotFound, WrongState, UserInputError) as exc:
            code = 404 if isinstance(exc, NotFound) else 409 if isinstance(exc, WrongState) else 400
            return error(code, exc.user_message, None)
        await record(action, None, Outcome.OK, f"stream opened: {request.query_string[:150]}")
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        stopping = request.app.get(STOPPING) or asyncio.Event()
        try:
            await response.prepare(request)
            while not isinstance(event := await _next(events, stopping), _End):
                if event is None:
                    await response.write(b": keep-alive\n\n")
                else:
                    await response.write(f"id: {event.id}\ndata: {event.data}\n\n".encode())
        except ConnectionResetError:  # the client went away: the stream ends here
            log.debug("event stream %s: client disconnected", request.path)
        finally:
            await events.aclose()
        return response

    return handle
