"""The admin HTTP API on the app's aiohttp server: bearer-token auth, validated JSON bodies.

Mounted only when `IRIS_API_TOKEN` is set. Every request is authenticated first (constant-time
comparison; 401 otherwise), then the body is read with a 64 KiB cap (413), parsed (400),
validated against the pydantic model of `gateway/admin/schema.py` (422 with field errors), and
the operation runs; `NotFound` is 404, `WrongState` 409. Every authenticated action is
audited. Errors are JSON `{"error": ..., "detail": ...}` and never carry exception text.
`/healthz` is not here: it stays unauthenticated and belongs to the HTTP server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from gateway.admin.schema import EmptyRequest, IdRequest, IntentRequest, TriggerRequest, openapi
from gateway.admin.stats import Stats
from gateway.core.admin_ops import JSON, NewIntent, NewTrigger, ProactiveOps
from gateway.core.errors import NotFound, UserInputError, WrongState
from gateway.core.metrics import Metrics
from gateway.core.ports import Clock
from vault.audit import AuditLog, Outcome

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
Operation = Callable[[web.Request, Any], Awaitable[JSON]]
Route = tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]]]


class ApiError(Exception):
    def __init__(self, status: int, error: str, detail: Any = None) -> None:
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


def _error(status: int, error: str, detail: Any = None) -> web.Response:
    body: dict[str, Any] = {"error": error}
    if detail is not None:
        body["detail"] = detail
    headers = {"WWW-Authenticate": 'Bearer realm="iris"'} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)


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


async def read_body(request: web.Request, model: type[BaseModel]) -> BaseModel:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise ApiError(413, "body too large", f"the limit is {MAX_BODY} bytes")
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ApiError(413, "body too large", f"the limit is {MAX_BODY} bytes")
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        raise ApiError(400, "malformed JSON") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = [
            {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]}
            for e in exc.errors()
        ]
        raise ApiError(422, "invalid request", fields) from None


def query_user(request: web.Request, *, required: bool) -> str | None:
    user = request.query.get("user")
    if user is None and required:
        raise ApiError(422, "invalid request", [{"field": "user", "message": "required"}])
    if user is not None and ":" not in user:
        raise ApiError(
            422,
            "invalid request",
            [{"field": "user", "message": "a user key such as telegram:12345"}],
        )
    return user


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
    ) -> None:
        self._token = token
        self._ops = ops
        self._stats = stats
        self._metrics = metrics
        self._audit = audit
        self._clock = clock

    def routes(self) -> list[Route]:
        routes: list[Route] = [
            ("GET", "/stats", self._endpoint("stats", None, self._get_stats, audited=False)),
            ("GET", "/metrics", self._metrics_endpoint),
            ("GET", "/openapi.json", self._openapi),
        ]
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
                    self._endpoint("pending", None, self._pending, audited=False),
                ),
                (
                    "GET",
                    "/proactive/quota",
                    self._endpoint("quota", None, self._quota, audited=False),
                ),
                ("POST", "/proactive/scan", self._endpoint("scan", EmptyRequest, self._scan)),
                ("POST", "/proactive/execute", self._endpoint("execute", IdRequest, self._execute)),
            ]
        return routes

    def _authorized(self, request: web.Request) -> bool:
        return token_matches(request.headers.get("Authorization"), self._token)

    def _endpoint(
        self, action: str, model: type[BaseModel] | None, op: Operation, *, audited: bool = True
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
                await self._record(action, args, Outcome.OK, json.dumps(result)[:200])
            return web.json_response(result)

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
        return web.json_response(openapi())

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
