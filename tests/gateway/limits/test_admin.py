"""The admin surface of the limits: `/admin budget [user]`, `GET /budget?user=` with its
bearer token and OpenAPI entry, the audit trail, and the spend and refusal metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.admin.api import AdminApi
from gateway.app.app import App
from gateway.core.clock import ManualClock
from tests.conftest import app_with
from tests.fakes import MemoryChannel, inbound
from tests.gateway.limits.support import CostingLLM, limits_config, local_ms
from tests.prom import parse

TOKEN = "budget-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    config = limits_config(
        tmp_path,
        user_usd_per_day=0.001,
        global_usd_per_day=1.0,
        auth={"admins": ["memory:boss"], "allow": ["memory:*"]},
    )
    clock = ManualClock(local_ms("2026-01-05T10:00", "UTC"))
    async with app_with(config, MemoryChannel(), CostingLLM(1_500), clock=clock) as built:
        await built.router.submit(inbound("spend", user="u1"))
        await built.router.submit(inbound("over", user="u1"))
        yield built


@pytest.fixture
async def client(app: App) -> AsyncIterator[TestClient[Any, Any]]:
    api = AdminApi(
        token=TOKEN, ops=None, stats=app.stats, metrics=app.metrics, audit=app.audit,
        clock=app.clock, reads=app.contributions.api_reads,
    )  # fmt: skip
    web_app = web.Application()
    for method, path, handler in api.routes():
        web_app.router.add_route(method, path, handler)
    async with TestClient(TestServer(web_app, host="127.0.0.1")) as test_client:
        yield test_client


async def admin(app: App, args: str) -> str:
    channel = app.channels[0]
    assert isinstance(channel, MemoryChannel)
    await app.router.submit(inbound(f"/admin budget {args}".strip(), user="boss", chat="boss"))
    return channel.texts()[-1]


async def test_admin_budget_of_a_user_and_of_everyone(app: App) -> None:
    text = await admin(app, "memory:u1")
    assert text.splitlines()[0] == "Budget of memory:u1 (UTC):"
    assert "• user_usd_per_day 2026-01-05: $0.0015 spent of $0.001" in text
    everyone = await admin(app, "")
    assert "memory:u1 on 2026-01-05: $0.0015, 1,500 tokens, 1 calls, 1 refused" in everyone
    assert "Usage:" in await admin(app, "not-a-key")
    assert "No user memory:ghost" in await admin(app, "memory:ghost")
    entries = await app.audit.recent()
    assert [e.action for e in entries[:4]] == ["admin budget"] * 4
    assert [e.outcome for e in entries[:4]] == ["error", "error", "ok", "ok"]


async def test_get_budget_needs_the_token_and_reports_live_meters(
    client: TestClient[Any, Any], app: App
) -> None:
    assert (await client.get("/budget?user=memory:u1")).status == 401
    response = await client.get("/budget?user=memory:u1", headers=AUTH)
    assert response.status == 200
    body = await response.json()
    day = body["user"]["budgets"][1]
    assert day == {
        "limit": "user_usd_per_day",
        "window": "2026-01-05",
        "unit": "usd",
        "cap": 0.001,
        "spent": 0.0015,
        "reserved": 0.0,
        "remaining": 0.0,
        "resets_at": "2026-01-06T00:00:00+00:00",
    }
    assert body["global"]["spent"] == 0.0015
    everyone = await (await client.get("/budget", headers=AUTH)).json()
    assert everyone["users_today"][0]["user"] == "memory:u1"
    assert (await client.get("/budget?user=memory:ghost", headers=AUTH)).status == 404
    assert (await client.get("/budget?user=nocolon", headers=AUTH)).status == 422
    audited = [e for e in await app.audit.recent() if e.action == "api budget"]
    assert [e.outcome for e in audited] == ["refused", "refused", "ok", "ok"]
    assert "memory:u1" in audited[-1].result


async def test_openapi_lists_the_budget_read(client: TestClient[Any, Any]) -> None:
    document = await (await client.get("/openapi.json", headers=AUTH)).json()
    operation = document["paths"]["/budget"]["get"]
    assert operation["security"] == [{"bearer": []}]
    assert operation["parameters"][0]["name"] == "user"
    assert operation["parameters"][0]["required"] is False


async def test_metrics_count_spend_and_refusals(app: App) -> None:
    types, samples = parse(await app.metrics.render())
    assert types["iris_spend_usd_total"] == "counter"
    assert types["iris_budget_refusals_total"] == "counter"
    spend = {tuple(sorted(labels.items())): v for n, labels, v in samples
             if n == "iris_spend_usd_total"}  # fmt: skip
    assert spend == {(("model", "test-model"), ("purpose", "chat")): 0.0015}
    refusals = [(labels, v) for n, labels, v in samples if n == "iris_budget_refusals_total"]
    assert refusals == [({"limit": "user_usd_per_day"}, 1.0)]
