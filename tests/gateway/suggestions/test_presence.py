"""What a chat is offered when nothing could be suggested: no suggestion tools, no block, no
finder; and how that changes once documents, memories or follow-ups exist. Also the used
items of a chat surviving a new store (a restart) although `take_used` no longer writes in
every turn."""

from __future__ import annotations

from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.core.messages import ChatKind
from gateway.suggestions.feature import SuggestionsFeature
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.suggestions.support import World, world_for
from vault.suggestions import SuggestionStore

SUGGESTION_TOOLS = {"context_suggest", "suggestion_feedback"}
DEPLOY_Q = "the canary deploy failed, how do I roll back the release?"


def offered(llm: FakeLLM) -> set[str]:
    return {t.name for t in llm.requests[-1].tools}


async def test_nothing_to_find_offers_no_suggestion_tools_until_a_memory(tmp_path: Path) -> None:
    llm, channel = FakeLLM(), MemoryChannel()
    async with app_with(make_config(tmp_path), channel, llm) as app:
        presence = app.feature(SuggestionsFeature).presence
        await app.router.submit(inbound("the deploy to staging failed again"))
        assert offered(llm).isdisjoint(SUGGESTION_TOOLS)
        assert "memory_remember" in offered(llm)
        assert len(channel.sent) == 1  # the reply, no block
        (user,) = [r[0] for r in await app.vault.fetchall("SELECT id FROM users")]
        await app.memories.remember(user, "staging deploys need the VPN", 0)
        await app.router.submit(inbound("the deploy to staging failed again"))
        assert offered(llm) >= SUGGESTION_TOOLS
        # Memories are never suggested in a group: nothing there to offer.
        await app.router.submit(inbound("hi", chat="g1", kind=ChatKind.GROUP, mentioned=True))
        assert offered(llm).isdisjoint(SUGGESTION_TOOLS)
        assert not await presence.documents()


async def test_a_follow_up_alone_lets_the_finder_run(tmp_path: Path) -> None:
    llm, channel, clock = FakeLLM(), MemoryChannel(), ManualClock()
    async with app_with(make_config(tmp_path), channel, llm, clock) as app:
        feature = app.feature(SuggestionsFeature)
        await app.router.submit(inbound("hello"))
        w = World(app, llm, channel, clock, tmp_path)
        scope = await w.scope()
        assert not await feature.presence.anything(scope)
        await w.follow_up(scope, "check the staging deploy logs")
        assert await feature.presence.anything(scope)
        assert not await feature.presence.offerable(scope)  # the tools: follow-ups are in context
        await app.router.submit(inbound("any news on the staging deploy logs?"))
        assert "A pending follow-up" in channel.sent[-1].text


async def test_indexed_documents_offer_the_tools_unless_suggestions_are_off(
    tmp_path: Path,
) -> None:
    async with world_for(tmp_path / "on", knowledge_tokens=4000) as w:
        await w.say("hello")
        assert SUGGESTION_TOOLS | {"documents_search"} <= offered(w.llm)
    async with world_for(tmp_path / "off", knowledge_tokens=4000, enabled=False) as w:
        await w.say("hello")
        assert offered(w.llm).isdisjoint(SUGGESTION_TOOLS)
        assert "documents_search" in offered(w.llm)


async def test_a_used_item_reaches_the_request_through_a_new_store(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        await w.say(DEPLOY_Q)
        await w.say("/use 1")
        rows = await w.app.vault.fetchall("SELECT DISTINCT chat FROM suggestions")
        (chat,) = [r[0] for r in rows]
        fresh = SuggestionStore(w.app.vault)  # what a restarted process starts with
        assert [r.title for r in await fresh.take_used(chat, 1)] == [
            "Runbook: rolling back a deploy"
        ]
        assert await fresh.take_used(chat, 2) == []
        # Given once in all: the feature's own store looks (it saw the use) and finds nothing.
        await w.say("ok, walk me through it")
        assert "The user chose to use this suggested item" not in str(w.llm.requests[-1])
