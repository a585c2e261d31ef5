"""The analyzer embeds a message only when its verdict can depend on the embedding, and an
earlier message's vector the first time a later message needs it — once, kept in the state."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from gateway.analyzer.detect import Params, judge_conversation, replay
from gateway.analyzer.feature import AnalyzerFeature
from gateway.analyzer.lazy import judge_lazily
from gateway.analyzer.semantic import COMPLAINTS, CONTRASTS, SemanticSide, pack
from gateway.analyzer.state import VERSION, WatchState
from gateway.app.config import Config
from tests.fakes import inbound
from tests.fakes.embedder import FakeEmbedder
from tests.gateway.analyzer.test_watcher import (
    COMPACT_TIP,
    FRUSTRATED,
    ON_TOPIC,
    SHIFT,
    Harness,
    open_app,
    tip_of,
)


class Recording(FakeEmbedder):
    """The fake embedder, keeping every text it was given (the complaints aside)."""

    model = "fake-topics-recording"

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        self.texts.extend(t for t in texts if t not in COMPLAINTS + CONTRASTS)
        return await super().embed(texts, query=query)


@pytest.fixture
async def recorded(config: Config) -> AsyncIterator[tuple[Harness, Recording]]:
    embedder = Recording()
    app, channel, clock = await open_app(config, embedder=embedder)
    try:
        yield Harness(app, channel, clock), embedder
    finally:
        await app.__aexit__(None, None, None)


def state_of(harness: Harness) -> WatchState:
    watcher = harness.app.feature(AnalyzerFeature).watcher
    assert watcher is not None
    ((_, state),) = watcher._saved.values()
    return state


async def test_a_message_is_embedded_only_when_a_verdict_needs_it_and_then_once(
    recorded: tuple[Harness, Recording],
) -> None:
    harness, embedder = recorded
    first, second, question = ON_TOPIC
    await harness.say_all([first, second])
    # The session is too young for any tip: nothing is embedded, the texts wait in the state.
    assert embedder.texts == []
    assert state_of(harness).pending_of(embedder.model) == [first, second]
    # A question can be a topic shift: it is embedded, and so are the earlier two, now (the
    # latest first).
    assert tip_of(await harness.say(question)) is None
    assert embedder.texts == [question, second, first]
    state = state_of(harness)
    assert state.pending_of(embedder.model) == [] and len(state.vectors_of(embedder.model)) == 3
    # A shift is told from the vectors kept: only the new message is embedded.
    assert tip_of(await harness.say(SHIFT)) is not None
    assert embedder.texts == [question, second, first, SHIFT]


async def test_quotes_and_rule_complaints_are_not_embedded(
    recorded: tuple[Harness, Recording],
) -> None:
    harness, embedder = recorded
    await harness.say_all(ON_TOPIC)
    seen = len(embedder.texts)
    quoted = 'My colleague wrote "the replica is lagging again".'
    await harness.say(quoted)  # cannot be a shift, and quoted words are nobody's complaint
    assert embedder.texts[seen:] == []
    reply = await harness.say(FRUSTRATED)  # a frustration rule: /compact whatever its topic
    assert COMPACT_TIP in (tip_of(reply) or "")
    assert embedder.texts[seen:] == []
    assert state_of(harness).pending_of(embedder.model)[-2:] == [quoted, FRUSTRATED]


async def test_a_plain_statement_is_embedded_for_the_complaint_similarity(
    recorded: tuple[Harness, Recording],
) -> None:
    harness, embedder = recorded
    await harness.say_all(ON_TOPIC)
    seen = len(embedder.texts)
    statement = "The replica is in another region."
    await harness.say(statement)
    # Not a question, so never a shift; but it may complain in words no rule knows.
    assert embedder.texts[seen:] == [statement]


@pytest.mark.parametrize(
    "messages",
    [
        [*ON_TOPIC, SHIFT],
        [*ON_TOPIC, FRUSTRATED],
        [*ON_TOPIC, "you are not listening to me"],
        [*ON_TOPIC, 'She said "how should my salary be paid?"'],
        [*ON_TOPIC, "By the way, how should my salary be paid?"],
        [ON_TOPIC[0], SHIFT],
        ["   ", *ON_TOPIC, SHIFT],
    ],
)
async def test_lazy_verdicts_equal_the_eager_ones(messages: list[str]) -> None:
    embedder = FakeEmbedder()
    side = SemanticSide(embedder)
    params = Params(semantic_threshold=0.5, complaint_threshold=0.9)
    eager = [await side.embed(m) for m in messages[-5:]]
    last = eager[-1]
    complaint = side.complaint_similarity(last) if last else None
    want = judge_conversation(messages, params, 4, vectors=eager, complaint=complaint)

    async def earlier() -> list[tuple[float, ...]]:
        found = [await side.embed(m) for m in messages[:-1][-4:]]
        return [v for v in found if v is not None]

    got = await judge_lazily(side, messages[-1], replay(messages[:-1], 4), params, earlier)
    verdict = got.analysis
    assert (verdict.suggestion, verdict.frustration, verdict.near(params)) == (
        want.suggestion,
        want.frustration,
        want.near(params),
    )


def test_state_keeps_deferred_texts_and_reads_the_previous_version() -> None:
    vector = (0.6, 0.8)
    state = WatchState(messages=2)
    state.with_vector("m", "an earlier message", window=4)
    state.with_vector("m", (pack(vector), vector), window=4)
    data = state.to_json()
    assert data["version"] == VERSION
    assert data["vectors"][0] == {"text": "an earlier message"}
    back = WatchState.from_json(data)
    assert back.pending_of("m") == ["an earlier message"] and len(back.vectors_of("m")) == 1
    back.resolved("m", {"an earlier message": (pack(vector), vector)})
    assert back.pending_of("m") == [] and len(back.vectors_of("m")) == 2
    dropped = WatchState.from_json(data).resolved("m", {"an earlier message": None})
    assert dropped.pending_of("m") == [] and len(dropped.vectors_of("m")) == 1
    # Version 2 (vectors only) reads as it is.
    v2 = {**data, "version": 2, "vectors": [pack(vector)]}
    assert len(WatchState.from_json(v2).vectors_of("m")) == 1
    assert WatchState.from_json({**data, "vectors": [{"text": ""}, {"text": 3}]}).vectors == []


async def test_a_message_deferred_in_one_process_is_embedded_in_the_next(config: Config) -> None:
    embedder = Recording()
    app, _, _ = await open_app(config, embedder=embedder)
    try:
        await app.router.submit(inbound(ON_TOPIC[0]))
        await app.router.submit(inbound(ON_TOPIC[1]))
    finally:
        await app.__aexit__(None, None, None)
    assert embedder.texts == []
    again = Recording()
    app, _, _ = await open_app(config, embedder=again)
    try:
        await app.router.submit(inbound(ON_TOPIC[2]))
    finally:
        await app.__aexit__(None, None, None)
    assert again.texts == [ON_TOPIC[2], ON_TOPIC[1], ON_TOPIC[0]]  # the latest first
