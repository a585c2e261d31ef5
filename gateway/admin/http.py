"""The one HTTP server of Iris (aiohttp): webhooks, `GET /healthz` and the admin API.

Components contribute `WebRoute`s (framework-free handlers from `gateway.core.ports`) or plain
aiohttp handlers before the server starts (`App._start_http` is where routes are added; aiohttp
freezes its router once serving); entering the context manager binds the socket, and
leaving it stops accepting and closes open connections. Port 0 binds a free port (tests);
`port` tells which one was bound. A handler that raises answers 500 with a fixed text — the
exception is logged, never echoed.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Self

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from gateway.admin.bodies import plain
from gateway.core.errors import AddressInUse, ConfigError
from gateway.core.messages import ChannelHealth, WebRequest, WebResponse
from gateway.core.ports import WebHandler, WebRoute
from gateway.core.replica import Replica
from gateway.turns.delivery_health import DeliveryProblem

log = logging.getLogger(__name__)


class _QuietBadRequests(logging.Filter):
    """aiohttp logs a malformed HTTP request (a NUL in a header, a broken request line) with
    its traceback at ERROR; anyone who can reach the port can send one, so it becomes a debug
    line. The client still gets aiohttp's 400."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.msg, record.args = "malformed HTTP request refused: %s", (error.message,)
        return True


_protocol_log = logging.getLogger(f"{__name__}.protocol")
_protocol_log.addFilter(_QuietBadRequests())

# Slack and Telegram payloads are small; a cap keeps a hostile client from filling memory.
MAX_BODY_BYTES = 1024 * 1024
# Set when the server begins to stop: long-lived responses (event streams) end on it, so
# stopping does not wait out aiohttp's shutdown timeout for them.
STOPPING = web.AppKey("stopping", asyncio.Event)


@web.middleware
async def _json_route_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A path no route serves, or a method its route does not take, answered in the API's
    JSON error shape (aiohttp's own answers are plain text)."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        return web.json_response(
            {"error": "method not allowed", "detail": f"this path takes {allowed}"},
            status=405,
            headers={"Allow": allowed},
        )
    except web.HTTPNotFound:
        return web.json_response({"error": "no such path"}, status=404)


class HttpServer:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 8787) -> None:
        self._host = host
        self._port = port
        self._app = web.Application(
            client_max_size=MAX_BODY_BYTES, middlewares=[_json_route_errors]
        )
        self._app[STOPPING] = asyncio.Event()
        self._app.on_shutdown.append(_stopping)
        self._runner: web.AppRunner | None = None
        self._bound_port: int | None = None

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("the HTTP server is not listening")
        return self._bound_port

    def add_route(self, route: WebRoute) -> None:
        self._app.router.add_route(route.method, route.path, _adapt(route.handler))

    def add_aiohttp_route(
        self,
        method: str,
        path: str,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> None:
        """For core routes that want aiohttp directly (e.g. the admin API)."""
        self._app.router.add_route(method, path, handler)

    async def __aenter__(self) -> Self:
        runner = web.AppRunner(  # bodies as sent: see `bodies.plain`
            self._app, handle_signals=False, access_log=None, logger=_protocol_log,
            auto_decompress=False,
        )  # fmt: skip
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            where = f"http: cannot listen on {self._host}:{self._port}"
            if exc.errno == errno.EADDRINUSE:  # taken now; may be free in a moment
                raise AddressInUse(f"{where}: the address is in use") from exc
            raise ConfigError([f"{where} ({exc.strerror})"]) from exc
        self._runner = runner
        addresses = runner.addresses
        self._bound_port = int(addresses[0][1]) if addresses else self._port
        log.info("HTTP server listening on %s:%d", self._host, self._bound_port)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._bound_port = None


async def _stopping(app: web.Application) -> None:
    app[STOPPING].set()


def _adapt(handler: WebHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.Response:
        if (refused := plain(request)) is not None:
            return web.Response(status=400, text=refused)
        body = await request.read()
        req = WebRequest(
            method=request.method,
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            query=request.query_string,
            body=body,
        )
        try:
            res = await handler(req)
        except Exception:
            log.exception("HTTP handler for %s failed", request.path)
            return web.Response(status=500, text="internal error")
        return web.Response(
            status=res.status, text=res.body, content_type=res.content_type, headers=res.headers
        )

    return handle


def health_report(
    healths: Sequence[ChannelHealth],
    delivery: Mapping[str, DeliveryProblem] | None = None,
    replica: Replica | None = None,
    degraded: Sequence[str] = (),
) -> dict[str, object]:
    """The `/healthz` document: `ok` only if every channel is connected and can deliver, and
    this replica raises no alarm. It names the replica and the roles it leads (with several
    replicas on one vault, each answers for itself), and whether each wake-up hint listener
    (LISTEN/NOTIFY) is up: one that is down is `degraded`, not a problem — the replica polls
    instead (at most 1 s late), as a standby channel still sends.

    Each channel judges its own link's staleness (a poller knows its poll period; an events
    endpoint may be quiet for hours and still be fine); `delivery` names the channels whose
    sends are failing (`gateway/turns/delivery_health.py`), with the reason, until they
    deliver again.
    """
    problems = delivery or {}
    channels: dict[str, dict[str, object]] = {
        h.channel: {
            "connected": h.connected,
            "last_inbound_ms": h.last_inbound_ms,
            "last_ok_ms": h.last_ok_ms,
            "detail": h.detail,
        }
        for h in healths
    }
    # One readable line per problem ("model: API key rejected"), for people and probes.
    lines = [f"{h.channel}: {h.detail or 'not connected'}" for h in healths if not h.connected]
    for name, problem in problems.items():
        entry = channels.setdefault(name, {})
        entry.update(
            delivering=False,
            delivery_detail=problem.reason,
            delivery_failing_since_ms=problem.since_ms,
        )
        lines.append(f"{name}: cannot deliver: {problem.reason}")
    if replica is None:
        return {"ok": not lines, "problems": lines, "channels": channels}
    lines.extend(f"alarm: {name}: {reason}" for name, reason in sorted(replica.alarms.items()))
    hints = {name: up.is_set() for name, up in sorted(replica.hints.items())}
    slower = [f"{name}: no wake-up hints, polling until LISTEN reconnects"
              for name, up in hints.items() if not up]  # fmt: skip
    return {
        "ok": not lines,
        "problems": lines,
        "channels": channels,
        "replica": replica.id,
        "leaderships": sorted(replica.leaderships),
        "alarms": dict(replica.alarms),
        "hints": hints,
        # Working, only slower: not a problem (`ok` stays), like a channel standing by.
        "degraded": [*slower, *degraded],
    }


def health_route(
    collect: Callable[[], Sequence[ChannelHealth]],
    delivery: Callable[[], Mapping[str, DeliveryProblem]] | None = None,
    replica: Replica | None = None,
    degraded: Callable[[], Sequence[str]] = tuple,
) -> WebRoute:
    async def healthz(request: WebRequest) -> WebResponse:
        problems = delivery() if delivery is not None else None
        report = health_report(collect(), problems, replica, degraded())
        return WebResponse(
            status=200 if report["ok"] else 503,
            body=json.dumps(report),
            content_type="application/json",
        )

    return WebRoute("GET", "/healthz", healthz)
