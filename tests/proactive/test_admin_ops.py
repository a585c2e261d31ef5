"""The admin surface on the real proactive engine: `/admin` subcommands and the HTTP API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.admin.api import AdminApi
from gateway.app.app import App
from gateway.core.clock import ManualClock
from proactive.feature import ProactiveFeature
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.prom import parse, value

TOKEN = "admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def admin_app(tmp_path: Path, llm: FakeLLM, channel: MemoryChannel) -> AsyncIterator[App]:
    config = make_config(tmp_path, auth={"admins": ["memory:boss"], "allow": ["memory:*"]})
    clock = ManualClock()
    clock.advance(12 * 3600)  # midday UTC: outside the default quiet hours
    async with app_with(config, channel, llm, clock=clock) as app:  # fmt: skip
        yield app


@pytest.fixture
async def api(admin_app: App) -> AsyncIterator[TestClient[Any, Any]]:
    admin = AdminApi(
        token=TOKEN,
        ops=admin_app.contributions.ops,
        stats=admin_app.stats,
        metrics=admin_app.metrics,
        audit=admin_app.audit,
        clock=admin_app.clock,
    )
    web_app = web.Application()
    for method, path, handler in admin.routes():
        web_app.router.add_route(method, path, handler)
    async with TestClient(TestServer(web_app, host="127.0.0.1")) as client:
        yield client


async def say(app: App, text: str, user: str) -> None:
    await app.router.submit(inbound(text, user=user, chat=f"chat-{user}"))


async def status(app: App, intent_id: int) -> str:
    return str(await app.vault.scalar(
        "SELECT status FROM proactive_intents WHERE id = ?", (intent_id,)))  # fmt: skip


async def test_http_register_list_cancel_and_state_errors(
    admin_app: App, api: TestClient[Any, Any]
) -> None:
    await say(admin_app, "hi", "alice")
    body = {"user": "memory:alice", "chat": "memory:chat-alice", "what": "ask about the exam",
            "delay_minutes": 90}  # fmt: skip
    created = await api.post("/proactive/intent", headers=AUTH, json=body)
    assert created.status == 200
    intent_id = (await created.json())["id"]
    assert await status(admin_app, intent_id) == "pending"

    pending = await (await api.get("/proactive/pending", params={"user": "memory:alice"},
                                   headers=AUTH)).json()  # fmt: skip
    assert [i["what"] for i in pending["intents"]] == ["ask about the exam"]

    unknown = await api.post("/proactive/intent", headers=AUTH,
                             json={**body, "user": "memory:nobody"})  # fmt: skip
    assert unknown.status == 404
    assert (await api.post("/proactive/cancel", headers=AUTH, json={"id": 999})).status == 404
    assert (await api.post("/proactive/cancel", headers=AUTH, json={"id": intent_id})).status == 200
    assert await status(admin_app, intent_id) == "cancelled"
    again = await api.post("/proactive/cancel", headers=AUTH, json={"id": intent_id})
    assert again.status == 409

    quota = await (await api.get("/proactive/quota", params={"user": "memory:alice"},
                                 headers=AUTH)).json()  # fmt: skip
    assert (quota["remaining"], quota["max_per_day"]) == (3, 3)


async def test_http_external_trigger_is_deduplicated_and_goes_through_the_gate(
    admin_app: App, api: TestClient[Any, Any], llm: FakeLLM, channel: MemoryChannel
) -> None:
    await say(admin_app, "hi", "alice")
    await say(admin_app, "hi", "bob")
    body = {"user": "memory:alice", "chat": "memory:chat-alice", "key": "deploy-42",
            "context": "The deploy alice was waiting for finished"}  # fmt: skip
    created = await api.post("/proactive/trigger", headers=AUTH, json=body)
    assert created.status == 200
    trigger_id = (await created.json())["id"]
    again = await (await api.post("/proactive/trigger", headers=AUTH, json=body)).json()
    assert (again["id"], again["duplicate"]) == (trigger_id, True)  # a retry, not a 2nd event
    other = await api.post("/proactive/trigger", headers=AUTH, json={**body, "key": "ticket-7"})
    assert other.status == 409  # one open external trigger per user
    assert "pending" in (await other.json())["error"]
    elsewhere = await api.post("/proactive/trigger", headers=AUTH,
                               json={**body, "chat": "memory:chat-bob"})  # fmt: skip
    assert elsewhere.status == 404  # alice never wrote there: nothing of hers goes to bob
    unknown = await api.post("/proactive/trigger", headers=AUTH,
                             json={**body, "chat": "memory:nowhere"})  # fmt: skip
    assert unknown.status == 404
    blank = await api.post("/proactive/trigger", headers=AUTH, json={**body, "context": "  "})
    assert blank.status == 422
    llm.enqueue_tool("proactive_decision", {"action": "send", "message": "Your deploy is out."})
    assert admin_app.feature(ProactiveFeature).engine is not None
    await admin_app.feature(ProactiveFeature).engine.tick()
    state = await admin_app.vault.scalar(
        "SELECT status FROM proactive_triggers WHERE id = ?", (trigger_id,)
    )
    assert state == "sent"
    assert channel.texts()[-1] == "Your deploy is out."
    prompt = llm.requests[-1]
    assert prompt.purpose == "proactive_gate"
    assert "The deploy alice was waiting for finished" in str(prompt.messages)


async def test_http_execute_goes_through_the_gate(
    admin_app: App, api: TestClient[Any, Any], llm: FakeLLM, channel: MemoryChannel
) -> None:
    await say(admin_app, "hi", "alice")
    body = {"user": "memory:alice", "chat": "memory:chat-alice", "what": "ask about the exam",
            "delay_minutes": 600}  # fmt: skip
    intent_id = (await (await api.post("/proactive/intent", headers=AUTH, json=body)).json())["id"]
    llm.enqueue_tool("proactive_decision", {"action": "send", "message": "How was the exam?"})
    ran = await api.post("/proactive/execute", headers=AUTH, json={"id": intent_id})
    assert (await ran.json())["status"] == "due"
    assert admin_app.feature(ProactiveFeature).engine is not None
    await admin_app.feature(ProactiveFeature).engine.tick()  # what the woken engine does next
    assert await status(admin_app, intent_id) == "sent"
    assert channel.texts()[-1] == "How was the exam?"
    assert llm.requests[-1].purpose == "proactive_gate"
    conflict = await api.post("/proactive/execute", headers=AUTH, json={"id": intent_id})
    assert conflict.status == 409

    metrics = await (await api.get("/metrics", headers=AUTH)).text()
    _, samples = parse(metrics)
    assert value(samples, "iris_proactive_outcomes_total", source="intents", type="ai",
                 status="sent") == 1  # fmt: skip
    assert value(samples, "iris_proactive_messages_total", state="sent") == 1
    stats = await (await api.get("/stats", headers=AUTH)).json()
    assert stats["24h"]["proactive"]["outcomes"]["intents"] == {"ai/sent": 1}


async def test_admin_chat_subcommands(admin_app: App, llm: FakeLLM, channel: MemoryChannel) -> None:
    await say(admin_app, "hi", "alice")
    llm.enqueue_tool("proactive_intent", {"what": "check the fix", "delay_minutes": 120})
    llm.enqueue_text("ok")
    await say(admin_app, "I'll fix it later", "alice")
    await say(admin_app, "/admin intents", "boss")
    assert "#1 memory:alice ai [pending]: check the fix" in channel.texts()[-1]
    await say(admin_app, "/admin quota memory:alice", "boss")
    assert "3/3 proactive messages left today" in channel.texts()[-1]
    await say(admin_app, "/admin fire x", "boss")
    assert channel.texts()[-1] == "Usage: /admin fire ID"
    llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "too soon"})
    await say(admin_app, "/admin fire 1", "boss")
    assert channel.texts()[-1].startswith("Follow-up #1 runs now")
    assert admin_app.feature(ProactiveFeature).engine is not None
    await admin_app.feature(ProactiveFeature).engine.tick()
    assert await status(admin_app, 1) == "skipped"
    await say(admin_app, "/admin cancel 1", "boss")
    assert "is skipped, not pending" in channel.texts()[-1]
    await say(admin_app, "/admin scan", "boss")
    assert channel.texts()[-1].startswith("Scan done: dormant_user 0")
    await say(admin_app, "/admin triggers", "boss")
    assert channel.texts()[-1] == "Pending triggers: none."
    actions = [(e.action, e.outcome) for e in reversed(await admin_app.audit.recent())]
    assert actions == [("admin intents", "ok"), ("admin quota", "ok"), ("admin fire", "error"),
                       ("admin fire", "ok"), ("admin cancel", "error"), ("admin scan", "ok"),
                       ("admin triggers", "ok")]  # fmt: skip


async def test_admin_fires_a_follow_up_of_their_own_chat_without_deadlock(
    admin_app: App, llm: FakeLLM, channel: MemoryChannel
) -> None:
    llm.enqueue_tool("proactive_intent", {"what": "check the backup", "delay_minutes": 120})
    llm.enqueue_text("ok")
    await say(admin_app, "I'll check the backup later", "boss")
    # The turn holds this chat's lock; the follow-up's execution takes it too. Firing must
    # not wait for the execution inside the turn (it did, and the chat hung forever).
    await asyncio.wait_for(say(admin_app, "/admin fire 1", "boss"), timeout=10)
    llm.enqueue_tool("proactive_decision", {"action": "send", "message": "Backup OK?"})
    assert admin_app.feature(ProactiveFeature).engine is not None
    await asyncio.wait_for(admin_app.feature(ProactiveFeature).engine.tick(), timeout=10)
    assert channel.texts()[-1] == "Backup OK?"
