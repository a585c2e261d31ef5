"""`/context`, its subcommands, `/context events` for admins (persisted, audited, applied on
the next turn) and the same operations on the admin HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.admin.api import AdminApi
from gateway.app.app import App
from gateway.app.config import Config
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import knowledge_config, write

TOKEN = "t0ken"


def admin_config(tmp_path: Path) -> Config:
    config = knowledge_config(tmp_path)
    auth = config.settings.auth.model_copy(update={"admins": ("memory:boss",)})
    return type(config)(
        settings=config.settings.model_copy(update={"auth": auth}),
        secrets=config.secrets,
        source=config.source,
    )


class Chat:
    def __init__(self, app: App, channel: MemoryChannel, llm: FakeLLM) -> None:
        self.app, self.channel, self.llm = app, channel, llm

    async def __call__(self, text: str, user: str = "boss") -> str:
        await self.app.router.submit(inbound(text, user=user))
        return self.channel.texts()[-1]


@pytest.fixture
async def chat(tmp_path: Path) -> AsyncIterator[Chat]:
    llm, channel = FakeLLM(), MemoryChannel()
    async with app_with(admin_config(tmp_path), channel, llm) as app:
        yield Chat(app, channel, llm)


async def test_context_before_any_request_and_the_usage(chat: Chat) -> None:
    assert "No model request in this chat" in await chat("/context")
    assert "Usage: /context" in await chat("/context frobnicate")
    assert "No team documents" in await chat("/context docs")
    said = await chat("/context docs runbook")  # `why` takes a title; `docs` nothing
    assert said == "Usage: /context docs (nothing after it)"


async def test_context_why_lists_the_injection_history(chat: Chat, tmp_path: Path) -> None:
    write(tmp_path, "kafka.md", "# Kafka lag runbook\n\nScale the consumer group.\n")
    write(tmp_path, "kafka2.md", "# Kafka topics\n\nRetention.\n")
    assert "never given to me" in await chat("/context why kafka lag")
    await chat("kafka consumer group lag?")
    why = await chat("/context why Kafka lag runbook")
    assert "given in this chat:" in why and ": relevant · " in why
    assert "matches several documents" in await chat("/context why kafka")
    assert "No document titled 'nothing'" in await chat("/context why nothing")
    assert "Usage: /context why TITLE" in await chat("/context why")


class SlashChannel(MemoryChannel):
    """A channel whose commands are typed as one slash command's words, like Slack's."""

    def command_hint(self, command: str) -> str:
        return f"/iris {command}"


async def test_context_replies_name_the_commands_as_this_channel_types_them(
    tmp_path: Path,
) -> None:
    channel = SlashChannel()
    async with app_with(admin_config(tmp_path), channel, FakeLLM()) as app:
        chat = Chat(app, channel, FakeLLM())
        assert await chat("/context why") == (
            "Usage: /iris context why TITLE — a document title from /iris context docs."
        )
        assert "See /iris context docs." in await chat("/context why nothing")
        assert await chat("/context events list", user="someone") == (
            "/iris context events is for admins only."
        )
        assert "Usage: /iris context events list |" in await chat("/context events frob")


async def test_events_are_for_admins_and_refusals_are_audited(chat: Chat) -> None:
    reply = await chat("/context events list", user="someone")
    assert "for admins only" in reply
    rows = await chat.app.vault.fetchall("SELECT actor, action, outcome FROM audit_log")
    assert [tuple(r) for r in rows] == [("memory:someone", "context events list", "refused")]


async def test_events_list_disable_priority_apply_on_the_next_turn(chat: Chat) -> None:
    listing = await chat("/context events list")
    assert "system:" in listing and "persona: system, priority 100, on" in listing
    assert "documents: enrich, priority 40, on" in listing
    await chat("hello")
    assert "local time" in chat.llm.requests[-1].system_dynamic
    assert "profile: system, priority 50, off" in await chat("/context events disable profile")
    await chat("hello again")
    assert "local time" not in chat.llm.requests[-1].system_dynamic
    reply = await chat("/context events priority profile 200")
    assert "priority 200 (default 50)" in reply
    assert "Unknown context provider 'nope'. Providers: profile, persona, " in await chat(
        "/context events enable nope"
    )
    assert "cannot be switched off" in await chat("/context events disable message")
    assert "whole number" in await chat("/context events priority profile high")
    actions = await chat.app.vault.fetchall("SELECT action, outcome FROM audit_log ORDER BY id")
    assert [tuple(a) for a in actions] == [
        ("context events disable", "ok"),
        ("context events priority", "ok"),
        ("context events enable", "refused"),
        ("context events disable", "refused"),
    ]


async def test_event_settings_survive_a_restart(tmp_path: Path) -> None:
    llm, channel = FakeLLM(), MemoryChannel()
    config = admin_config(tmp_path)
    async with app_with(config, channel, llm) as app:
        await app.router.submit(inbound("/context events disable profile", user="boss"))
    async with app_with(config, channel, llm) as app:
        await app.router.submit(inbound("hello", user="boss"))
        assert "local time" not in llm.requests[-1].system_dynamic
        await app.router.submit(inbound("/context events list", user="boss"))
        assert "profile: system, priority 50, off" in channel.texts()[-1]


@pytest.fixture
async def client(chat: Chat) -> AsyncIterator[TestClient[Any, Any]]:
    app = chat.app
    api = AdminApi(
        token=TOKEN, ops=None, stats=app.stats, metrics=app.metrics, audit=app.audit,
        clock=app.clock, reads=app.contributions.api_reads, writes=app.contributions.api_writes,
    )  # fmt: skip
    web_app = web.Application()
    for method, path, handler in api.routes():
        web_app.router.add_route(method, path, handler)
    async with TestClient(TestServer(web_app, host="127.0.0.1")) as test_client:
        yield test_client


async def test_events_over_http(client: TestClient[Any, Any], chat: Chat) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert (await client.get("/context/providers")).status == 401
    listing = await (await client.get("/context/providers", headers=auth)).json()
    names = [p["name"] for p in listing["providers"]]
    assert names[0] == "persona" and "documents" in names and "message" in names
    changed = await client.post(
        "/context/providers", json={"name": "memories", "enabled": False}, headers=auth
    )
    assert changed.status == 200 and (await changed.json())["enabled"] is False
    assert "memories: enrich, priority 50, off" in await chat("/context events list")
    unknown = await client.post("/context/providers", json={"name": "nope"}, headers=auth)
    assert unknown.status == 404  # an unknown id, as for every route
    assert "Providers: persona" in (await unknown.json())["error"]
    invalid = await client.post(
        "/context/providers", json={"name": "memories", "priority": 5000}, headers=auth
    )
    assert invalid.status == 422
    nothing = await client.post("/context/providers", json={"name": "memories"}, headers=auth)
    assert nothing.status == 400 and "Nothing to change" in (await nothing.json())["error"]
    document = await (await client.get("/openapi.json", headers=auth)).json()
    assert {"get", "post"} <= set(document["paths"]["/context/providers"])
    assert "404" in document["paths"]["/context/providers"]["post"]["responses"]
    assert "parameters" not in document["paths"]["/context/providers"]["get"]  # no `user`
    rows = await chat.app.vault.fetchall("SELECT actor, action, outcome FROM audit_log")
    assert ("api", "api context/providers", "ok") in [tuple(r) for r in rows]
