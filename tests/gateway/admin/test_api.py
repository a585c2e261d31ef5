"""The admin HTTP API over loopback: auth, validation, status codes, audit, metrics."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import gateway.admin.api as admin_api
from gateway.admin.api import AdminApi, token_matches
from gateway.app.app import App
from gateway.core.admin_ops import JSON, NewIntent, NewTrigger
from gateway.core.errors import NotFound, WrongState
from tests.prom import check_histograms, parse, value

TOKEN = "s3cret-token"
OPS = web.AppKey("ops", "FakeOps")
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class FakeOps:
    """Scripted engine answers; records the validated requests it was given."""

    def __init__(self) -> None:
        self.registered: list[NewIntent] = []

    async def register(self, request: NewIntent, *, now_ms: int) -> JSON:
        if request.user == "telegram:unknown":
            raise NotFound("no such user: telegram:unknown")
        self.registered.append(request)
        return {"id": 1, "status": "pending"}

    async def trigger(self, request: NewTrigger, *, now_ms: int) -> JSON:
        return {"id": 2, "type": "external", "status": "pending"}

    async def cancel(self, item_id: int, *, now_ms: int) -> JSON:
        if item_id == 404:
            raise NotFound(f"no follow-up {item_id}")
        if item_id == 409:
            raise WrongState(f"follow-up {item_id} is already sent")
        return {"id": item_id, "status": "cancelled"}

    async def pending(self, user: str | None) -> JSON:
        return {"intents": [], "triggers": [], "user": user}

    async def quota(self, user: str, *, now_ms: int) -> JSON:
        return {"user": user, "used": 1, "max": 3}

    async def scan(self) -> JSON:
        return {"dormant_user": 0}

    async def execute(self, item_id: int, *, now_ms: int) -> JSON:
        raise RuntimeError("secret internal detail")


@asynccontextmanager
async def serving(app: App, ops: FakeOps | None) -> AsyncIterator[TestClient[Any, Any]]:
    """The admin API over `app`'s parts and `ops` (None: the proactive engine is off)."""
    api = AdminApi(
        token=TOKEN, ops=ops, stats=app.stats, metrics=app.metrics, audit=app.audit, clock=app.clock
    )
    web_app = web.Application()
    for method, path, handler in api.routes():
        web_app.router.add_route(method, path, handler)
    if ops is not None:
        web_app[OPS] = ops
    async with TestClient(TestServer(web_app, host="127.0.0.1")) as test_client:
        yield test_client


@pytest.fixture
async def client(app: App) -> AsyncIterator[TestClient[Any, Any]]:
    async with serving(app, FakeOps()) as test_client:
        yield test_client


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}],
)
async def test_missing_or_wrong_token_is_401(
    client: TestClient[Any, Any], headers: dict[str, str]
) -> None:
    for method, path in (
        ("GET", "/stats"),
        ("GET", "/metrics"),
        ("POST", "/proactive/scan"),
        ("GET", "/openapi.json"),
    ):
        response = await client.request(method, path, headers=headers, json={})
        assert response.status == 401
        assert (await response.json())["error"] == "unauthorized"


def test_token_compare_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []
    real = admin_api.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(admin_api.hmac, "compare_digest", spy)
    assert token_matches(f"Bearer {TOKEN}", TOKEN)
    assert not token_matches("Bearer x", TOKEN)
    assert not token_matches(f"Bearer {TOKEN}{TOKEN}", TOKEN)
    assert seen == [(32, 32)] * 3  # equal-length digests, whatever was sent


async def test_intent_validation_and_errors(client: TestClient[Any, Any]) -> None:
    ok = {"user": "telegram:1", "chat": "telegram:1", "what": "check the fix", "delay_minutes": 60}
    response = await client.post("/proactive/intent", headers=AUTH, json=ok)
    assert response.status == 200
    assert await response.json() == {"id": 1, "status": "pending"}
    ops = client.server.app[OPS]
    assert ops.registered[0].delay_minutes == 60

    bad = {"user": "nobody", "chat": "telegram:1", "what": "", "delay_minutes": 5, "at": "x"}
    response = await client.post("/proactive/intent", headers=AUTH, json=bad)
    assert response.status == 422
    fields = {f["field"] for f in (await response.json())["detail"]}
    assert {"user", "what", "at"} <= fields

    naive = {**ok, "delay_minutes": None, "at": "2026-11-23T09:00:00"}
    response = await client.post("/proactive/intent", headers=AUTH, json=naive)
    assert response.status == 422
    unknown = {**ok, "user": "telegram:unknown"}
    response = await client.post("/proactive/intent", headers=AUTH, json=unknown)
    assert response.status == 404


async def test_status_codes_for_bad_bodies_and_states(client: TestClient[Any, Any]) -> None:
    response = await client.post("/proactive/cancel", headers=AUTH, data=b"{not json")
    assert response.status == 400
    response = await client.post("/proactive/cancel", headers=AUTH, data=b"x" * (64 * 1024 + 1))
    assert response.status == 413
    assert (await client.post("/proactive/cancel", headers=AUTH, json={"id": 404})).status == 404
    assert (await client.post("/proactive/cancel", headers=AUTH, json={"id": 409})).status == 409
    assert (await client.post("/proactive/cancel", headers=AUTH, json={"id": 0})).status == 422
    assert (await client.post("/proactive/cancel", headers=AUTH, json={"id": 5})).status == 200
    failed = await client.post("/proactive/execute", headers=AUTH, json={"id": 5})
    assert failed.status == 500
    assert "secret" not in await failed.text()
    assert (await client.get("/proactive/quota", headers=AUTH)).status == 422
    quota = await client.get("/proactive/quota", params={"user": "slack:U1"}, headers=AUTH)
    assert (await quota.json())["user"] == "slack:U1"


async def test_actions_are_audited(client: TestClient[Any, Any], app: App) -> None:
    await client.post("/proactive/cancel", headers=AUTH, json={"id": 5})
    await client.post("/proactive/cancel", headers=AUTH, json={"id": 409})
    await client.post("/proactive/scan", headers=AUTH, data=b"{}")
    entries = await app.audit.recent()
    assert [(e.action, e.outcome, e.args) for e in reversed(entries)] == [
        ("api cancel", "ok", {"id": 5}),
        ("api cancel", "refused", {"id": 409}),
        ("api scan", "ok", {}),
    ]


async def test_without_the_engine_the_document_lists_no_proactive_path(app: App) -> None:
    async with serving(app, None) as client:
        spec = await (await client.get("/openapi.json", headers=AUTH)).json()
        assert "/stats" in spec["paths"]
        assert [p for p in spec["paths"] if p.startswith("/proactive/")] == []
        assert (await client.post("/proactive/scan", headers=AUTH, json={})).status == 404


async def test_stats_metrics_and_openapi(client: TestClient[Any, Any]) -> None:
    stats = await (await client.get("/stats", headers=AUTH)).json()
    assert set(stats) == {"24h", "30d", "replicas"}
    [replica] = stats["replicas"]["replicas"]  # SQLite: this one replica, no heartbeat
    assert replica["leaderships"] == []  # no channel here needs a leader
    metrics = await client.get("/metrics", headers=AUTH)
    assert metrics.content_type == "text/plain"
    types, samples = parse(await metrics.text())
    check_histograms(types, samples)
    assert value(samples, "iris_replica_info", replica=replica["id"]) == 1
    spec = await (await client.get("/openapi.json", headers=AUTH)).json()
    assert spec["openapi"].startswith("3.")
    assert "/proactive/intent" in spec["paths"]
    body = spec["paths"]["/proactive/intent"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/IntentRequest"
    }
    intent = spec["components"]["schemas"]["IntentRequest"]
    assert "what" in intent["required"]
    assert len(intent["oneOf"]) == 2  # exactly one of delay_minutes or at
    assert "$defs" not in json.dumps(spec)  # every reference resolves inside the document
    assert spec["paths"]["/proactive/scan"]["post"]["requestBody"]["required"] is False


OK_INTENT = {"user": "telegram:1", "chat": "telegram:1", "what": "check", "delay_minutes": 60}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/proactive/cancel", {"id": 2**64}, "id"),
        ("/proactive/cancel", {"id": 2**63}, "id"),
        ("/proactive/execute", {"id": -1}, "id"),
        ("/proactive/cancel", {"id": "5"}, "id"),
        ("/proactive/cancel", {"id": True}, "id"),
        ("/proactive/cancel", {"id": 1.5}, "id"),
        ("/proactive/cancel", [1], "body"),
        ("/proactive/cancel", {"id": 1, "extra": 1}, "extra"),
        ("/proactive/intent", {**OK_INTENT, "delay_minutes": None}, "body"),
        ("/proactive/intent", {**OK_INTENT, "at": "2026-11-23T09:00:00+01:00"}, "body"),
        ("/proactive/intent", {**OK_INTENT, "delay_minutes": "60"}, "delay_minutes"),
        ("/proactive/intent", {**OK_INTENT, "delay_minutes": 1e308}, "delay_minutes"),
        ("/proactive/intent", {**OK_INTENT, "what": "   "}, "what"),
        ("/proactive/intent", {**OK_INTENT, "user": "telegram:1\n"}, "user"),
        ("/proactive/intent", {**OK_INTENT, "user": "telegram:１"}, "user"),
        ("/proactive/intent",
         {**OK_INTENT, "delay_minutes": None, "at": "2026-02-30T09:00:00+01:00"}, "at"),
        ("/proactive/intent",
         {**OK_INTENT, "delay_minutes": None, "at": "2026-11-23 09:00+01:00"}, "at"),
        ("/proactive/trigger", {"user": "telegram:1", "chat": "telegram:1", "context": "\t "},
         "context"),
    ],
)  # fmt: skip
async def test_out_of_range_and_mistyped_fields_are_422_with_field_errors(
    client: TestClient[Any, Any], path: str, body: Any, field: str
) -> None:
    response = await client.post(path, headers=AUTH, json=body)
    assert response.status == 422
    answer = await response.json()
    assert answer["error"] == "invalid request"
    assert field in {f["field"] for f in answer["detail"]}, answer


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 30_000 + b"]" * 30_000, "nested deeper than 32"),  # not a RecursionError
        (b'{"id": ' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper than 32"),
        (b'{"id": NaN}', "not valid JSON"),
        (b'{"id": Infinity}', "not valid JSON"),
        (b'{"id": 1', "not valid JSON (line 1, column 9)"),
        (b'{"id": 1' + b"0" * 5000 + b"}", "not valid JSON"),
        (rb'{"id": 1, "x": "\ud800"}', "lone surrogate"),
        (b'\xff{"id": 1}', "not UTF-8"),
    ],
)
async def test_malformed_and_deeply_nested_json_is_400_with_a_field_error(
    client: TestClient[Any, Any], raw: bytes, message: str
) -> None:
    response = await client.post("/proactive/cancel", headers=AUTH, data=raw)
    assert response.status == 400
    answer = await response.json()
    assert answer["error"] == "malformed JSON"
    (detail,) = answer["detail"]
    assert detail["field"] == "body" and message in detail["message"]


async def test_integral_numbers_count_as_integers_as_json_schema_says(
    client: TestClient[Any, Any],
) -> None:
    response = await client.post("/proactive/cancel", headers=AUTH, data=b'{"id": 5.0}')
    assert (response.status, await response.json()) == (200, {"id": 5, "status": "cancelled"})


@pytest.mark.parametrize("user", ["nobody", "telegram:1 ", "a:b\n", "Telegram:1", "x:" + "é"])
async def test_a_bad_user_query_is_422(client: TestClient[Any, Any], user: str) -> None:
    response = await client.get("/proactive/quota", params={"user": user}, headers=AUTH)
    assert response.status == 422
    assert (await response.json())["detail"][0]["field"] == "user"


async def http_app(tmp_path: Any, secrets: dict[str, str]) -> App:
    from gateway.app.config import Config, Secrets
    from tests.conftest import app_with, make_config
    from tests.fakes import FakeLLM, MemoryChannel

    base = make_config(tmp_path, http={"enabled": True, "port": 0})
    config = Config(settings=base.settings, secrets=Secrets(secrets), source=None)
    return app_with(config, MemoryChannel(), FakeLLM())


async def test_api_is_mounted_on_the_app_server_only_with_a_token(tmp_path: Any) -> None:
    import aiohttp

    async with (
        await http_app(tmp_path, {"IRIS_API_TOKEN": TOKEN}) as app,
        aiohttp.ClientSession() as session,
    ):
        assert app.http is not None
        base = f"http://127.0.0.1:{app.http.port}"
        async with session.get(f"{base}/healthz") as health:
            assert set(await health.json()) == {
                "ok", "channels", "problems", "replica", "leaderships", "alarms", "hints",
                "degraded",
            }  # fmt: skip
        async with session.get(f"{base}/stats") as denied:
            assert denied.status == 401
        async with session.get(f"{base}/stats", headers=AUTH) as allowed:
            assert allowed.status == 200
    async with await http_app(tmp_path / "b", {}) as app, aiohttp.ClientSession() as session:
        assert app.http is not None
        async with session.get(f"http://127.0.0.1:{app.http.port}/stats", headers=AUTH) as gone:
            assert gone.status == 404


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
async def test_a_compressed_body_is_a_400_after_the_token_check(
    tmp_path: Any, encoding: str
) -> None:
    """The server does not decompress: a body claiming gzip that is not was a 500 (and
    brotli a bare 400 before any token check)."""
    import gzip

    import aiohttp

    body = json.dumps({"user": "telegram:1", "what": "x", "delay_minutes": 5}).encode()
    async with (
        await http_app(tmp_path, {"IRIS_API_TOKEN": TOKEN}) as app,
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        assert app.http is not None
        url = f"http://127.0.0.1:{app.http.port}/proactive/intent"
        for sent in (body, gzip.compress(body)):
            headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
            async with session.post(url, data=sent, headers=headers) as denied:
                assert denied.status == 401
            async with session.post(url, data=sent, headers={**headers, **AUTH}) as res:
                assert res.status == 400
                answer = await res.json()
                assert answer["error"] == "compressed body"
                assert "send the body uncompressed" in answer["detail"][0]["message"]
