import asyncio
import logging
from collections.abc import Sequence

import pytest

from gateway.analyzer.semantic import (
    COMPLAINTS,
    CONTRASTS,
    SemanticSide,
    cosine,
    pack,
    topic_similarity,
    unpack,
)
from gateway.analyzer.state import VERSION, WatchState
from tests.fakes.clock import until
from tests.fakes.embedder import FakeEmbedder


def test_packed_vectors_keep_their_direction() -> None:
    vector = (0.6, -0.8, 0.0)
    back = unpack(pack(vector))
    assert back is not None
    assert cosine(back, vector) > 0.999
    assert len(pack([0.05] * 384)) == 512  # int8, base64


@pytest.mark.parametrize("text", ["", "not base64!", "AAAA"])
def test_unusable_packed_vectors_are_none(text: str) -> None:
    assert unpack(text) is None  # "AAAA" decodes to a zero vector: no direction


def test_topic_similarity_mixes_the_centre_and_the_nearest() -> None:
    a, b = (1.0, 0.0), (0.0, 1.0)
    assert topic_similarity(a, [a, a]) == pytest.approx(1.0)
    assert topic_similarity(a, [b, b]) == pytest.approx(0.0)
    # Centre of a and b is 45° away (0.707), the nearest is a itself (1.0).
    assert topic_similarity(a, [a, b]) == pytest.approx((0.7071 + 1.0) / 2, abs=1e-3)
    assert topic_similarity(a, []) is None
    assert topic_similarity(a, [(1.0, 0.0, 0.0)]) is None


class OwnModelEmbedder(FakeEmbedder):
    model = "fake-topics-own"


async def test_side_embeds_through_the_port_and_knows_the_complaints() -> None:
    embedder = OwnModelEmbedder()
    side = SemanticSide(embedder)
    vector = await side.embed("our postgres replica failover")
    assert vector is not None and len(vector) == embedder.dim
    assert embedder.calls == len(COMPLAINTS) + len(CONTRASTS) + 1  # prototypes once, then it
    await side.embed("the database again")
    assert embedder.calls == len(COMPLAINTS) + len(CONTRASTS) + 2
    assert side.complaint_similarity(vector) is not None
    assert await side.embed("   ") is None  # nothing to embed
    other = OwnModelEmbedder()  # another app with the same model: complaints are known
    await SemanticSide(other).embed("hello")
    assert other.calls == 1


async def test_no_embedder_means_no_vectors() -> None:
    side = SemanticSide(None)
    assert (await side.embed("hello"), side.model) == (None, None)


class BrokenEmbedder(FakeEmbedder):
    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        raise RuntimeError("model file missing")


async def test_failing_embedder_falls_back_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    side = SemanticSide(BrokenEmbedder())
    with caplog.at_level(logging.WARNING, logger="gateway.analyzer.semantic"):
        assert await side.embed("first") is None
        assert await side.embed("second") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "lexical" in warnings[0].getMessage()


# --- stored state --------------------------------------------------------------------------


def test_state_round_trips_with_its_vectors() -> None:
    vector = (0.6, 0.8)
    state = WatchState(recent=[["tea"]], messages=3, last_command="clear")
    state.with_vector("model-a", (pack(vector), vector), window=4)
    back = WatchState.from_json(state.to_json())
    assert back.to_json() == state.to_json()
    assert back.to_json()["version"] == VERSION
    assert cosine(back.vectors_of("model-a")[0], vector) > 0.999
    assert back.vectors_of("model-b") == []  # another model's vectors are not compared


def test_previous_version_state_is_migrated() -> None:
    old = {
        "recent": [["sourdough", "bread"], ["starter"]],
        "topic_started_ms": 5,
        "messages": 7,
        "last_suggestion_ms": 9,
        "last_suggestion_at": 6,
        "last_command": "compact",
        "followed": False,
    }
    state = WatchState.from_json(old)
    assert (state.recent, state.messages, state.last_command) == (old["recent"], 7, "compact")
    assert (state.vectors, state.vector_model) == ([], None)
    # Vectors in an old or unknown version, or of the wrong shape, are dropped.
    assert WatchState.from_json({**old, "vectors": [pack((1.0, 0.0))]}).vectors == []
    bad = {**old, "version": VERSION, "vector_model": "m", "vectors": [3, "!!", None]}
    assert WatchState.from_json(bad).vectors == []


def test_state_from_unexpected_json_starts_clean() -> None:
    state = WatchState.from_json(
        {"recent": "x", "messages": -3, "last_command": "rm", "last_suggestion_ms": True}
    )
    assert state == WatchState()
    kept = WatchState.from_json({"recent": [["a", 1], "b"], "messages": 4, "followed": True})
    assert (kept.recent, kept.messages, kept.followed) == ([["a"]], 4, True)


def test_vector_window_slides_and_resets_on_a_new_model() -> None:
    state = WatchState()
    for n in range(6):
        v = (1.0, float(n))
        state.with_vector("m", (pack(v), v), window=4)
    assert len(state.vectors) == 4
    v = (0.0, 1.0)
    state.with_vector("other", (pack(v), v), window=4)
    assert (len(state.vectors), state.vector_model) == (1, "other")


class Gated(FakeEmbedder):
    """Holds every call until `gate` opens; a model name of its own, so the per-process cache
    of the generic phrasings' vectors starts empty for it."""

    def __init__(self, model: str, *, failing: int = 0) -> None:
        super().__init__()
        self.model = model
        self.gate = asyncio.Event()
        self.batches: list[int] = []
        self.failing = failing  # calls that raise before it works

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        self.batches.append(len(texts))
        await self.gate.wait()
        if self.failing:
            self.failing -= 1
            raise RuntimeError("model file unreadable")
        return await super().embed(texts, query=query)


async def test_the_start_up_warming_and_a_first_message_share_one_embedding_of_the_phrasings() -> (
    None
):
    embedder = Gated("fake-warm-shared")
    side = SemanticSide(embedder)
    warming = asyncio.create_task(side.warm())
    first = asyncio.create_task(side.embed("you keep ignoring what I wrote"))
    await until(lambda: embedder.batches != [])  # the phrasings' one embedding is under way
    embedder.gate.set()
    await warming
    vector = await first
    assert embedder.batches == [len(COMPLAINTS) + len(CONTRASTS), 1]
    assert vector is not None and side.complaint_similarity(vector) is not None


async def test_a_failed_warming_is_logged_once_and_the_next_message_tries_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder = Gated("fake-warm-failing", failing=1)
    embedder.gate.set()
    side = SemanticSide(embedder)
    with caplog.at_level(logging.WARNING, logger="gateway.analyzer.semantic"):
        await side.warm()  # never raises: the lexical rules carry on
    assert [r.getMessage() for r in caplog.records] == [
        "analyzer embeddings unavailable (RuntimeError); using the lexical rules"
    ]
    vector = await side.embed("you keep ignoring what I wrote")
    assert vector is not None and side.complaint_similarity(vector) is not None
