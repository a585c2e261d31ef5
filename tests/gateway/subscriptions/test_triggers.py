"""The three triggers (a message, a document changed, a memory added), cooldowns and filters,
and durability: an event stored before a restart is delivered after it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.app.config import Secrets
from gateway.core.clock import ManualClock
from gateway.core.messages import UserRef
from gateway.knowledge.feature import KnowledgeFeature
from gateway.subscriptions.feature import SubscriptionsFeature
from gateway.subscriptions.schema import SubscriptionRequest
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import knowledge_config, write
from tests.gateway.subscriptions.helpers import receiver

SCOPES = {"docs/team/**": ["chat:memory:team"]}


def request(patterns: list[dict[str, Any]], **extra: Any) -> SubscriptionRequest:
    body = {"patterns": patterns, "callback": "poll", "min_relevance": 0.1,
            "cooldown_seconds": 0, **extra}  # fmt: skip
    return SubscriptionRequest.model_validate(body)


async def events(feature: SubscriptionsFeature, sub_id: str) -> list[dict[str, Any]]:
    return [e.payload["suggestion"] for e in await feature.store.events_since(sub_id, 0, 100)]


async def test_a_changed_document_reaches_only_chats_that_may_see_it(tmp_path: Path) -> None:
    config = knowledge_config(tmp_path, scopes=SCOPES)
    write(tmp_path, "runbooks/deploy.md", "# Deploy\n\nStep one.\n")
    write(tmp_path, "team/plan.md", "# Team plan\n\nOld plan.\n")
    async with app_with(config, MemoryChannel(), FakeLLM()) as app:
        indexer = app.feature(KnowledgeFeature).indexer
        subs = app.feature(SubscriptionsFeature)
        await indexer.scan()  # the first index is not a change
        await app.router.submit(inbound("hi", chat="team", user="u1"))
        glob = [{"type": "document", "pattern": "docs/**"}]
        everyone = await subs.ops.create(request(glob), owner="api")
        team = await subs.ops.create(request(glob, chats=["memory:team"]), owner="api")
        other = await subs.ops.create(request(glob, chats=["memory:elsewhere"]), owner="api")
        by_user = await subs.ops.create(request(glob, users=["memory:u1"]), owner="api")
        assert await events(subs, everyone["id"]) == []
        write(tmp_path, "runbooks/deploy.md", "# Deploy\n\nStep two.\n")
        write(tmp_path, "team/plan.md", "# Team plan\n\nNew plan.\n")
        await indexer.scan()

        def titles(found: list[dict[str, Any]]) -> list[list[str]]:
            return [[i["title"] for i in e["items"]] for e in found]

        [public] = await events(subs, everyone["id"])
        assert titles([public]) == [["Deploy"]]  # public only, and its source names no other
        assert public["trigger"]["source"] == "docs/runbooks/deploy.md"
        [event] = await events(subs, team["id"])
        assert event["trigger"]["type"] == "document_changed"
        assert event["trigger"]["chat"] == "memory:team"
        assert sorted(i["title"] for i in event["items"]) == ["Deploy", "Team plan"]
        assert sorted(event["trigger"]["source"].split(",")) == [
            "docs/runbooks/deploy.md", "docs/team/plan.md",
        ]  # fmt: skip
        [elsewhere] = await events(subs, other["id"])
        assert titles([elsewhere]) == [["Deploy"]]
        assert elsewhere["trigger"]["source"] == "docs/runbooks/deploy.md"
        assert await events(subs, by_user["id"]) == []


async def test_a_memory_reaches_only_subscriptions_naming_its_owner(tmp_path: Path) -> None:
    async with app_with(knowledge_config(tmp_path), MemoryChannel(), FakeLLM()) as app:
        subs = app.feature(SubscriptionsFeature)
        topic = [{"type": "entity", "pattern": "INC-[0-9]+"}]
        named = await subs.ops.create(request(topic, users=["memory:u1"]), owner="api")
        anyone = await subs.ops.create(request(topic), owner="api")
        for user in ("u1", "u2"):
            await app.router.submit(inbound("hello", chat=user, user=user))
            row = await app.conversations.get_user(UserRef(channel="memory", user_id=user))
            assert row is not None
            await app.memories.remember(row.pk, f"{user} owns INC-42 follow-up", 0)
        [event] = await events(subs, named["id"])
        assert event["trigger"]["type"] == "memory_added"
        assert event["items"][0]["summary"] == "u1 owns INC-42 follow-up"
        assert "INC-42" in event["items"][0]["reason"]
        assert await events(subs, anyone["id"]) == []


async def test_cooldown_and_chat_filters(tmp_path: Path) -> None:
    clock = ManualClock()
    async with app_with(knowledge_config(tmp_path), MemoryChannel(), FakeLLM(), clock) as app:
        subs = app.feature(SubscriptionsFeature)
        await app.router.submit(inbound("hello", chat="u1", user="u1"))
        row = await app.conversations.get_user(UserRef(channel="memory", user_id="u1"))
        assert row is not None
        await app.memories.remember(row.pk, "the billing deploy needs a change ticket", 0)
        words = [{"type": "entity", "pattern": "deploy", "keywords": ["billing"]}]
        slow = await subs.ops.create(request(words, cooldown_seconds=60), owner="api")
        elsewhere = await subs.ops.create(request(words, chats=["memory:u9"]), owner="api")
        for _ in range(3):
            await app.router.submit(inbound("billing deploy today?", chat="u1", user="u1"))
        assert len(await events(subs, slow["id"])) == 1
        clock.advance(61)
        await app.router.submit(inbound("billing deploy today?", chat="u1", user="u1"))
        assert len(await events(subs, slow["id"])) == 2
        assert await events(subs, elsewhere["id"]) == []
        await app.router.submit(inbound("nothing about it", chat="u1", user="u1"))
        clock.advance(61)
        await app.router.submit(inbound("what about lunch", chat="u1", user="u1"))
        assert len(await events(subs, slow["id"])) == 2  # no pattern matched


async def test_an_event_stored_before_a_restart_is_delivered_after_it(tmp_path: Path) -> None:
    config = knowledge_config(tmp_path)
    private = config.settings.subscriptions.model_copy(update={"webhook_private_addresses": True})
    config = replace(
        config,
        settings=config.settings.model_copy(update={"subscriptions": private}),
        secrets=Secrets({"IRIS_API_TOKEN": "t"}),
    )  # the receiver is on 127.0.0.1
    async with receiver() as hook:
        async with app_with(config, MemoryChannel(), FakeLLM()) as app:
            subs = app.feature(SubscriptionsFeature)
            body = {"callback": "webhook", "url": hook.url}
            made = await subs.ops.create(
                request([{"type": "entity", "pattern": "deploy"}], **body), owner="api"
            )
            hook.secret = made["secret"]
            await app.router.submit(inbound("hello", chat="u1", user="u1"))
            row = await app.conversations.get_user(UserRef(channel="memory", user_id="u1"))
            assert row is not None
            await app.memories.remember(row.pk, "the deploy key rotates monthly", 0)
            await app.router.submit(inbound("when does the deploy key rotate", user="u1"))
            # No delivery job ran: the event is only a row.
        assert hook.got == []
        async with app_with(config, MemoryChannel(), FakeLLM()) as app, asyncio.TaskGroup() as tg:
            job = tg.create_task(app.feature(SubscriptionsFeature).webhooks.run())
            await asyncio.wait_for(hook.arrived.wait(), 30)  # fail, never hang
            job.cancel()
        [got] = hook.got
        assert got["verified"] and got["body"]["subscription"] == made["id"]
