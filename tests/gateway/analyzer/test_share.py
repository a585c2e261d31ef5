"""The analyzer's embeddings draw on a share of embedding time: a burst beyond it is judged by
the rules alone (counted, the messages' texts kept to embed later), and embedding resumes as
the share refills. Time is a manual clock; an embedding "takes" what the fake says."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from gateway.analyzer.detect import Mode, Params, replay
from gateway.analyzer.feature import AnalyzerFeature
from gateway.analyzer.lazy import judge_lazily, session_vectors
from gateway.analyzer.semantic import SemanticSide
from gateway.analyzer.share import BURST_S, EmbedShare
from gateway.analyzer.state import WatchState
from gateway.app.app import App
from gateway.app.config import Config
from gateway.core.clock import ManualClock
from tests.conftest import make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.fakes.embedder import FakeEmbedder
from tests.gateway.analyzer.test_watcher import (
    FRUSTRATED,
    ON_TOPIC,
    SHIFT,
    ConfirmLLM,
    confirmed,
    verdict,
)
from tests.gateway.app.test_config import problems, write
from tests.prom import parse


def seconds(clock: ManualClock) -> float:
    return clock.now_ms() / 1000


class Slow(FakeEmbedder):
    """The fake embedder, each message taking `cost` seconds of the manual clock (the
    complaints' one-off batch takes none); `texts` are the messages it embedded."""

    model = "fake-topics-slow"

    def __init__(self, clock: ManualClock, cost: float) -> None:
        super().__init__()
        self.clock, self.cost = clock, cost
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        if len(texts) == 1:
            self.texts.append(texts[0])
            self.clock.advance(self.cost)
        return await super().embed(texts, query=query)


def test_the_bucket_sheds_when_spent_and_refills_at_the_share() -> None:
    clock = ManualClock()
    share = EmbedShare(0.25, now=lambda: seconds(clock))
    assert share.capacity == 0.25 * BURST_S
    spent = 0
    while share.admit():
        share.charge(0.6)
        spent += 1
    assert spent == 5  # 2.5 s held: five embeddings of 0.6 s, the last one into debt
    assert share.available_s == pytest.approx(-0.5)
    clock.advance(1.0)
    assert not share.admit()  # the debt refills at 0.25 s per second
    assert share.available_s == pytest.approx(-0.25)
    clock.advance(1.2)
    assert share.admit()
    clock.advance(3600)
    assert share.available_s == pytest.approx(share.capacity)  # it holds no more than that


def test_share_one_is_no_limit_and_zero_never_embeds() -> None:
    clock = ManualClock()
    free = EmbedShare(1.0, now=lambda: seconds(clock))
    for _ in range(100):
        assert free.admit()
        free.charge(10.0)
    never = EmbedShare(0.0, now=lambda: seconds(clock))
    clock.advance(3600)
    assert not never.admit()
    with pytest.raises(ValueError, match="embed_share"):
        EmbedShare(1.5)


async def test_a_spent_share_judges_by_the_rules_and_keeps_the_text() -> None:
    clock = ManualClock()
    embedder = Slow(clock, cost=1.0)
    share = EmbedShare(0.1, burst_s=1.0, now=lambda: seconds(clock))
    side = SemanticSide(embedder, share)
    params = Params(semantic_threshold=0.5, complaint_threshold=0.9)
    recent = replay(ON_TOPIC, 4)

    async def earlier() -> list[tuple[float, ...]]:
        found = [await side.embed(m) for m in ON_TOPIC]
        return [v for v in found if v is not None]

    first = await judge_lazily(side, SHIFT, recent, params, earlier)
    assert not first.shed and first.vector is not None
    assert first.analysis.topic_shift  # semantic: the new subject is seen
    assert not share.admit()  # four one-second embeddings against 0.1 s held

    shed = await judge_lazily(side, SHIFT, recent, params, earlier)
    assert (shed.shed, shed.deferred, shed.vector) == (True, True, None)
    # The lexical fallback's verdict: no shift without an explicit cue, no semantic score.
    assert (shed.analysis.mode, shed.analysis.topic_shift) == (Mode.LEXICAL, False)
    assert len(embedder.texts) == 4  # nothing embedded for it

    rule = await judge_lazily(side, FRUSTRATED, recent, params, earlier)
    assert rule.analysis.frustration and not rule.shed  # a rule needs no vector at all
    cued = await judge_lazily(side, "By the way, how should my salary be paid?", recent,
                              params, earlier)  # fmt: skip
    assert cued.shed and cued.analysis.topic_shift  # the lexical rules' cue still counts


@pytest.fixture
async def burst_app(tmp_path: Path) -> AsyncIterator[tuple[App, MemoryChannel, Slow]]:
    config = make_config(tmp_path, analyzer={"embed_share": 0.25})
    clock = ManualClock()
    embedder = Slow(clock, cost=1.0)
    feature = AnalyzerFeature(
        config.settings.analyzer, embedder=embedder, now=lambda: seconds(clock)
    )
    channel = MemoryChannel()
    app = App(config=config, channels=[channel], llm_override=FakeLLM(),
              use_llm_override=True, clock=clock, features=[feature])  # fmt: skip
    async with app:
        yield app, channel, embedder


def saved_state(app: App) -> WatchState:
    watcher = app.feature(AnalyzerFeature).watcher
    assert watcher is not None
    ((_, state),) = watcher._saved.values()
    return state


def outcomes(app: App) -> dict[str, float]:
    return app.metrics.counter_values()["iris_analyzer_embeddings_total"]


async def test_a_burst_beyond_the_share_sheds_and_refill_resumes(
    burst_app: tuple[App, MemoryChannel, Slow],
) -> None:
    app, channel, embedder = burst_app
    clock = embedder.clock
    statements = [f"The replica number {n} of the postgres database is in region {n}." for n in
                  range(8)]  # fmt: skip
    for text in statements:
        await app.router.submit(inbound(text))
    # The first two open the session (no verdict, kept as text); the share holds 2.5 s and
    # refills 0.25 s per 1 s embedding: three embedded, then shed.
    assert embedder.texts == statements[2:5]
    assert outcomes(app) == {"embedded": 3.0, "shed": 3.0}
    types, samples = parse(await app.metrics.render())  # as /metrics shows them
    assert types["iris_analyzer_embeddings_total"] == "counter"
    assert ("iris_analyzer_embeddings_total", {"outcome": "shed"}, 3.0) in samples
    state = saved_state(app)
    assert state.vectors[-3:] == statements[-3:]  # the shed messages kept as text
    assert all(not isinstance(e, str) for e in state.vectors[:1])
    assert len(channel.texts()) == 8  # every message answered

    clock.advance(20.0)  # the share refills (an idle stretch)
    await app.router.submit(inbound("Which settings make the database failover faster?"))
    assert outcomes(app)["embedded"] == 4.0
    # A shift candidate compares with the earlier messages: the shed texts are embedded now,
    # the latest first, each while the share admits it (2.5 s held: the message and two).
    assert embedder.texts[-3:] == [embedder.texts[-3], statements[7], statements[6]]
    assert saved_state(app).pending_of(embedder.model) == [statements[5]]


async def test_a_shed_message_is_not_put_to_the_confirmation_model(tmp_path: Path) -> None:
    # Judged lexically, SHIFT shares no word with the session: a margin of 0, within the band,
    # which would ask the model. Shed under load, it asks nothing and shows nothing.
    llm = ConfirmLLM(verdict("topic_shift"), hold_reply=False)
    texts = await confirmed(tmp_path, llm, embed_share=0.0)
    assert (llm.confirmations, texts[-1]) == ([], "ok")


def test_embed_share_out_of_range_is_one_line_naming_the_key(tmp_path: Path) -> None:
    (line,) = problems(write(tmp_path, "[analyzer]\nembed_share = 2\n"))
    assert line.startswith("analyzer.embed_share:")
    (line,) = problems(write(tmp_path, "[analyzer]\nembed_share = -0.1\n"))
    assert line.startswith("analyzer.embed_share:")


def test_default_share_and_config(config: Config) -> None:
    assert config.settings.analyzer.embed_share == 0.25


def test_no_more_than_two_messages_wait_for_the_model() -> None:
    clock = ManualClock()
    share = EmbedShare(0.25, now=lambda: seconds(clock))
    with share.holding():
        assert share.admit()
        with share.holding():
            assert not share.admit()  # a third would wait behind two: the rules judge it
        assert share.admit()

    def failing() -> None:
        with share.holding(), share.charging():
            clock.advance(0.5)
            raise RuntimeError

    with pytest.raises(RuntimeError):  # a failed embedding still ends, and is charged
        failing()
    assert share.waiting == 0 and share.available_s == pytest.approx(2.5 - 0.5)


def test_the_models_queue_counts_whoever_filled_it() -> None:
    clock = ManualClock()
    jobs = [0]
    share = EmbedShare(0.25, now=lambda: seconds(clock), queue=lambda: jobs[0])
    assert share.admit()
    jobs[0] = 2  # e.g. the indexer's batches of passages: a message would wait behind them
    assert not share.admit()
    jobs[0] = 1
    assert share.admit()


def test_without_a_spare_core_the_rules_judge() -> None:
    clock = ManualClock()
    spare = [False]
    share = EmbedShare(0.25, now=lambda: seconds(clock), spare=lambda: spare[0])
    assert not share.admit()
    spare[0] = True
    assert share.admit()
    # Share 1 is no limit at all: neither the spare core nor the waiting messages count.
    free = EmbedShare(1.0, now=lambda: seconds(clock), spare=lambda: False, queue=lambda: 9)
    with free.holding(), free.holding():
        assert free.admit()


async def test_a_session_backlog_is_embedded_only_while_the_share_admits() -> None:
    clock = ManualClock()
    embedder = Slow(clock, cost=1.0)
    spare = [True]
    share = EmbedShare(1.0 / BURST_S, now=lambda: seconds(clock), spare=lambda: spare[0])
    side = SemanticSide(embedder, share)
    state = WatchState()
    for text in ON_TOPIC:
        state.with_vector(embedder.model, text, 4)
    await side.warm()
    clock.advance(BURST_S)  # 1 s held
    spare[0] = False  # the machine is busy: nothing of the backlog is embedded
    assert await session_vectors(side, state) == []
    assert embedder.texts == [] and state.pending_of(embedder.model) == list(ON_TOPIC)
    spare[0] = True  # one second held: the latest is embedded, then the share is spent
    assert len(await session_vectors(side, state)) == 1
    assert embedder.texts == [ON_TOPIC[-1]]
    assert state.pending_of(embedder.model) == list(ON_TOPIC[:-1])


def test_the_composition_root_bounds_the_analyzer_by_a_spare_core(tmp_path: Path) -> None:
    from gateway.app.features import default_features
    from gateway.knowledge.local_embedder import AVAILABLE
    from gateway.knowledge.spare_core import SpareCore

    (feature,) = [
        f for f in default_features(make_config(tmp_path)) if isinstance(f, AnalyzerFeature)
    ]
    # With the local model, its own calls are what the spare core leaves out; without it,
    # nothing is embedded and nothing is asked.
    assert isinstance(feature.share.spare, SpareCore) is AVAILABLE
    assert (feature.share.spare is None) is not AVAILABLE
    assert (feature.share.queue is None) is not AVAILABLE
