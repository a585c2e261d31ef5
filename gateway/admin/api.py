"""The admin HTTP API on the app's aiohttp server: bearer-token auth, validated JSON bodies.

Mounted only when `IRIS_API_TOKEN` is set. Every request is authenticated first (constant-time
comparison; 401 otherwise), then its body and query are read (`gateway/admin/bodies.py`: 413,
400 for malformed or too deeply nested JSON, 422 with field errors against the models of
`gateway/admin/schema.py`), and the operation runs; `NotFound` is 404, `WrongState` 409, any
other `UserInputError` 400. Bad input is always a 4xx; a 500 is a bug (logged, never echoed).
Every authenticated action is audited. Errors are JSON `{"error": ..., "detail": ...}` as the
OpenAPI document says, and never carry exception text.
Features add operations through the seam (`ApiRead`, `ApiWrite`, `ApiRoute`: any method, path
parameters, a validated query, or a server-sent event stream, `gateway/admin/routes.py`).
`/healthz` is not here: it stays unauthenticated and belongs to the HTTP server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from gateway.admin.bodies import ApiError, query_user, read_body
from gateway.admin.routes import route_handler
from gateway.admin.schema import EmptyRequest, IdRequest, IntentRequest, TriggerRequest, openapi
from gateway.admin.stats import Stats
from gateway.core.admin_ops import JSON, NewIntent, NewTrigger, ProactiveOps
from gateway.core.errors import NotFound, UserInputError, WrongState
from gateway.core.metrics import Metrics
from gateway.core.ports import Clock
from gateway.features.contributions import ApiRead, ApiRoute, ApiWrite
from vault.audit import AuditLog, Outcome

log = logging.getLogger(__name__)

Operation = Callable[[web.Request, Any], Awaitable[JSON]]
Route = tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]]]


def _error(status: int, error: str, detail: Any = None) -> web.Response:
    body: dict[str, Any] = {"error": error}
    if detail is not None:
        body["detail"] = detail
    headers = {"WWW-Authenticate": 'Bearer realm="iris"'} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)


def _redacted(result: JSON) -> JSON:
    """What the audit keeps of an answer: a `secret` (shown to its caller once) is not kept."""
    if isinstance(result, dict) and "secret" in result:
        return {**result, "secret": "(shown once, not kept)"}
    return result


def token_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an `Authorization: Bearer <token>` header.

    Both sides are hashed first so the comparison always runs over equal-length digests:
    its time depends neither on where the bytes differ nor on the token's length.
    """
    scheme, _, given = (header or "").partition(" ")
    given_digest = hashlib.sha256(given.strip().encode()).digest()
    expected_digest = hashlib.sha256(token.encode()).digest()
    same = hmac.compare_digest(given_digest, expected_digest)
    return same and scheme.lower() == "bearer"


class AdminApi:
    def __init__(
        self,
        *,
        token: str,
        ops: ProactiveOps | None,
        stats: Stats,
        metrics: Metrics,
        audit: AuditLog,
        clock: Clock,
        reads: Sequence[ApiRead] = (),
        writes: Sequence[ApiWrite] = (),
        extra: Sequence[ApiRoute] = (),
    ) -> None:
        self._extra = tuple(extra)
        self._reads = tuple(reads)
        self._writes = tuple(writes)
        self._token = token
        self._ops = ops
        self._stats = stats
        self._metrics = metrics
        self._audit = audit
        self._clock = clock

    def routes(self) -> list[Route]:
        routes: list[Route] = [
            ("GET", "/stats", self._endpoint("stats", None, self._get_stats)),
            ("GET", "/metrics", self._metrics_endpoint),
            ("GET", "/openapi.json", self._openapi),
        ]
        for read in self._reads:  # the features' reads (`GET /budget`)
            name = read.path.strip("/")
            routes.append(("GET", read.path, self._endpoint(name, None, self._read(read))))
        for write in self._writes:  # the features' writes (`POST /context/providers`)
            name = write.path.strip("/")
            routes.append(
                ("POST", write.path, self._endpoint(name, write.body, self._write(write)))
            )
        for route in self._extra:  # the features' other operations (`/context/subscriptions`)
            handler = route_handler(
                route,
                authorized=self._authorized,
                endpoint=self._endpoint,
                record=self._record,
                error=_error,
            )
            routes.append((route.method, route.path, handler))
        if self._ops is not None:
            routes += [
                (
                    "POST",
                    "/proactive/intent",
                    self._endpoint("intent", IntentRequest, self._intent),
                ),
                (
                    "POST",
                    "/proactive/trigger",
                    self._endpoint("trigger", TriggerRequest, self._trigger),
                ),
                ("POST", "/proactive/cancel", self._endpoint("cancel", IdRequest, self._cancel)),
                (
                    "GET",
                    "/proactive/pending",
                    self._endpoint("pending", None, self._pending),
                ),
                (
                    "GET",
                    "/proactive/quota",
                    self._endpoint("quota", None, self._quota),
                ),
                ("POST", "/proactive/scan", self._endpoint("scan", EmptyRequest, self._scan)),
                ("POST", "/proactive/execute", self._endpoint("execute", IdRequest, self._execute)),
            ]
        return routes

    def _authorized(self, request: web.Request) -> bool:
        return token_matches(request.headers.get("Authorization"), self._token)

    def _endpoint(
        self,
        action: str,
        model: type[BaseModel] | None,
        op: Operation,
        *,
        audited: bool = True,
        ok_status: int = 200,
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            if not self._authorized(request):
                return _error(401, "unauthorized", "send Authorization: Bearer <IRIS_API_TOKEN>")
            args: Any = None
            try:
                args = await read_body(request, model) if model is not None else None
                result = await op(request, args)
            except ApiError as exc:
                outcome = Outcome.REFUSED if exc.status < 500 else Outcome.ERROR
                if audited:
                    await self._record(action, args, outcome, exc.error)
                return _error(exc.status, exc.error, exc.detail)
            except (NotFound, WrongState, UserInputError) as exc:
                status = (
                    404
                    if isinstance(exc, NotFound)
                    else 409
                    if isinstance(exc, WrongState)
                    else 400
                )
                if audited:
                    await self._record(action, args, Outcome.REFUSED, exc.user_message)
                return _error(status, exc.user_message)
            except Exception:
                log.exception("admin API %s failed", action)
                if audited:
                    await self._record(action, args, Outcome.ERROR, "internal error")
                return _error(500, "internal error")
            if audited:
                await self._record(action, args, Outcome.OK, json.dumps(_redacted(result))[:200])
            return web.json_response(result, status=ok_status)

        return handle

    async def _record(self, action: str, args: Any, outcome: Outcome, result: str) -> None:
        data = args.model_dump() if isinstance(args, BaseModel) else {}
        await self._audit.record(
            actor="api",
            via="http",
            action=f"api {action}",
            args=data,
            outcome=outcome,
            result=result,
            now_ms=self._clock.now_ms(),
        )

    async def _metrics_endpoint(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _error(401, "unauthorized", "send Authorization: Bearer <IRIS_API_TOKEN>")
        return web.Response(
            text=await self._metrics.render(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _error(401, "unauthorized", "send Authorization: Bearer <IRIS_API_TOKEN>")
        document = openapi(self._reads, self._writes, self._extra, proactive=self._ops is not None)
        return web.json_response(document)

    def _read(self, read: ApiRead) -> Operation:
        async def run(request: web.Request, args: None) -> JSON:
            user = query_user(request, required=read.user_required) if read.takes_user else None
            return await read.handler(user)

        return run

    def _write(self, write: ApiWrite) -> Operation:
        async def run(request: web.Request, args: BaseModel) -> JSON:
            return await write.handler(args)

        return run

    async def _get_stats(self, request: web.Request, args: None) -> JSON:
        return await self._stats.collect(self._clock.now_ms())

    @property
    def ops(self) -> ProactiveOps:
        assert self._ops is not None
        return self._ops

    async def _intent(self, request: web.Request, args: IntentRequest) -> JSON:
        intent = NewIntent(**args.model_dump())
        return await self.ops.register(intent, now_ms=self._clock.now_ms())

    async def _trigger(self, request: web.Request, args: TriggerRequest) -> JSON:
        trigger = NewTrigger(**args.model_dump())
        return await self.ops.trigger(trigger, now_ms=self._clock.now_ms())

    async def _cancel(self, request: web.Request, args: IdRequest) -> JSON:
        return await self.ops.cancel(args.id, now_ms=self._clock.now_ms())

    async def _pending(self, request: web.Request, args: None) -> JSON:
        return await self.ops.pending(query_user(request, required=False))

    async def _quota(self, request: web.Request, args: None) -> JSON:
        user = query_user(request, required=True)
        assert user is not None
        return await self.ops.quota(user, now_ms=self._clock.now_ms())

    async def _scan(self, request: web.Request, args: EmptyRequest) -> JSON:
        return await self.ops.scan()

    async def _execute(self, request: web.Request, args: IdRequest) -> JSON:
        return await self.ops.execute(args.id, now_ms=self._clock.now_ms())
