"""Part of the composition root: the app's HTTP server — the channels' webhook routes, the
features' routes, `/healthz`, and the admin API when `IRIS_API_TOKEN` is set.

It starts last, once the router can take what its routes receive.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from gateway.admin.api import AdminApi
from gateway.admin.http import HttpServer, health_route
from gateway.core.errors import AddressInUse, ConfigError
from gateway.core.ports import ServesRoutes

if TYPE_CHECKING:
    from gateway.app.app import App

log = logging.getLogger(__name__)


async def open_http(app: App, stack: AsyncExitStack) -> HttpServer | None:
    """The HTTP server starts last, once the router can take what its routes receive."""
    s = app.config.settings
    routes = [r for c in app.channels if isinstance(c, ServesRoutes) for r in c.routes()]
    if not s.http.enabled or not app.serve_http:
        if routes:
            raise ConfigError([f"http.enabled: {routes[0].path} needs the HTTP server"])
        return None
    server = HttpServer(host=s.http.host, port=s.http.port)
    for route in [*routes, *app.contributions.routes]:
        server.add_route(route)
    failing, unserved = app.model_health.failing, app.delivery.unserved_line

    def degraded() -> list[str]:
        return [line for line in (failing(), unserved()) if line]

    server.add_route(health_route(app.channel_health, app.delivery.health.problems, app.replica,
                                  degraded))  # fmt: skip
    _mount_admin_api(app, server)
    try:
        return await stack.enter_async_context(server)
    except AddressInUse as exc:
        raise AddressInUse(f"{exc} (another iris run?)") from exc


def _mount_admin_api(app: App, server: HttpServer) -> None:
    token = app.config.secrets.get("IRIS_API_TOKEN")
    if token is None:
        log.info("admin API is off: IRIS_API_TOKEN is not set")
        return
    api = AdminApi(
        token=token,
        ops=app.contributions.ops,
        stats=app.stats,
        metrics=app.metrics,
        audit=app.audit,
        clock=app.clock,
        reads=app.contributions.api_reads,
        writes=app.contributions.api_writes,
        extra=app.contributions.api_routes,
    )
    for method, path, handler in api.routes():
        server.add_aiohttp_route(method, path, handler)
