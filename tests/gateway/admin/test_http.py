"""The HTTP server: framework-free routes, fixed 500s, /healthz, bind errors."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway.admin.http import HttpServer, health_report, health_route
from gateway.core.errors import AddressInUse, ConfigError
from gateway.core.messages import ChannelHealth, WebRequest, WebResponse
from gateway.core.ports import WebRoute
from gateway.core.replica import Replica
from gateway.turns.delivery_health import DeliveryProblem

UP = ChannelHealth(channel="telegram", connected=True, last_ok_ms=5, last_inbound_ms=4)
DOWN = ChannelHealth(channel="slack", connected=False, detail="invalid token")


async def echo(request: WebRequest) -> WebResponse:
    return WebResponse(status=201, body=f"{request.headers.get('x-thing')}:{request.body.decode()}")


async def broken(request: WebRequest) -> WebResponse:
    raise RuntimeError("secret internals")


@pytest.fixture
async def base() -> AsyncIterator[str]:
    healths = [UP]
    server = HttpServer(host="127.0.0.1", port=0)
    server.add_route(WebRoute("POST", "/echo", echo))
    server.add_route(WebRoute("POST", "/broken", broken))
    server.add_route(health_route(lambda: healths))
    async with server:
        yield f"http://127.0.0.1:{server.port}"


async def test_routes_get_headers_lower_cased_and_the_raw_body(base: str) -> None:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{base}/echo", data=b"hi", headers={"X-Thing": "1"}) as r,
    ):
        assert (r.status, await r.text()) == (201, "1:hi")


async def test_a_failing_handler_answers_a_fixed_500(base: str) -> None:
    async with aiohttp.ClientSession() as s, s.post(f"{base}/broken") as r:
        assert r.status == 500
        assert "secret" not in await r.text()


async def test_an_unknown_path_or_method_is_answered_in_json(base: str) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{base}/nothing/here") as r:
            assert (r.status, await r.json()) == (404, {"error": "no such path"})
        async with s.get(f"{base}/echo") as r:
            assert r.status == 405 and r.headers["Allow"] == "POST"
            assert await r.json() == {
                "error": "method not allowed",
                "detail": "this path takes POST",
            }


async def test_healthz_reports_channels(base: str) -> None:
    async with aiohttp.ClientSession() as s, s.get(f"{base}/healthz") as r:
        assert r.status == 200
        body = await r.json()
    assert body == {
        "ok": True,
        "problems": [],
        "channels": {
            "telegram": {"connected": True, "last_inbound_ms": 4, "last_ok_ms": 5, "detail": ""}
        },
    }


def test_one_disconnected_channel_makes_health_not_ok() -> None:
    report = health_report([UP, DOWN])
    assert report["ok"] is False
    assert report["channels"]["slack"]["detail"] == "invalid token"  # type: ignore[index]
    assert report["problems"] == ["slack: invalid token"]


def test_a_channel_that_cannot_deliver_makes_health_not_ok_with_the_reason() -> None:
    failing = {"telegram": DeliveryProblem("a send was uncertain: ReadTimeout", since_ms=7)}
    report = health_report([UP], failing)
    assert report["ok"] is False
    telegram = report["channels"]["telegram"]  # type: ignore[index]
    assert telegram["connected"] is True  # receiving works; sending does not
    assert telegram["delivering"] is False
    assert telegram["delivery_detail"] == "a send was uncertain: ReadTimeout"
    assert telegram["delivery_failing_since_ms"] == 7
    assert report["problems"] == ["telegram: cannot deliver: a send was uncertain: ReadTimeout"]


async def test_healthz_answers_503_while_a_channel_cannot_deliver() -> None:
    problems: dict[str, DeliveryProblem] = {"memory": DeliveryProblem("gave up", since_ms=1)}
    server = HttpServer(host="127.0.0.1", port=0)
    server.add_route(health_route(list, lambda: problems))
    async with server, aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 503
            assert (await r.json())["channels"]["memory"]["delivering"] is False
        problems.clear()  # it delivered again
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 200


async def test_healthz_names_the_replica_its_leaderships_and_alarms() -> None:
    replica = Replica("iris-2")
    replica.lead("telegram-polling")
    server = HttpServer(host="127.0.0.1", port=0)
    server.add_route(health_route(lambda: [UP], replica=replica))
    async with server, aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 200
            body = await r.json()
        assert (body["replica"], body["leaderships"], body["alarms"]) == (
            "iris-2", ["telegram-polling"], {},
        )  # fmt: skip
        replica.alarm("vault", "PostgreSQL unreachable since 12:00")
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 503  # an alarm is a problem until it is cleared
            body = await r.json()
        assert body["problems"] == ["alarm: vault: PostgreSQL unreachable since 12:00"]
        assert body["alarms"] == {"vault": "PostgreSQL unreachable since 12:00"}
        replica.clear("vault")
        replica.resign("telegram-polling")
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 200
            assert (await r.json())["leaderships"] == []


async def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Not a configuration error (exit 2, which the service unit does not retry): the
        # port may be free in a moment, so `iris run` exits 1 and is restarted.
        with pytest.raises(AddressInUse, match=f"cannot listen on 127.0.0.1:{port}: the addr"):
            async with HttpServer(host="127.0.0.1", port=port):
                pass


async def test_an_address_this_host_does_not_have_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"cannot listen on 192\.0\.2\.1:"):  # TEST-NET-1
        async with HttpServer(host="192.0.2.1", port=0):
            pass
