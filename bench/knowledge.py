"""Knowledge retrieval: indexing cost, per-turn retrieval latency, and quality on the labelled set.

    python -m bench.knowledge [--documents 2000] [--queries 300] [--skip-quality]
                              [--sporadic 40] [--interleave 2]

1. Index N generated Markdown documents (~5 KB each, ~10 MB for 2,000): wall time, peak RSS.
2. Per-turn retrieval over that index, lexical (FTS5 bm25) and — with the `semantic` extra —
   semantic (query embedding by the local model + cosine over every chunk) and hybrid: p50/p99,
   back to back; with `--sporadic N`, also N of each a second apart, as chat messages come;
   with `--interleave R`, semantic and hybrid once more, taking turns query by query (R passes
   over the queries, each search embedding afresh), so that this VM's speed, which drifts
   within minutes, weighs on both alike: the figure to compare the two modes by.
   Embedding 10 MB of text with the local model takes far longer than this script should
   (its throughput is printed, measured on a sample), so the generated corpus's chunks get
   random unit vectors: a search costs the same whatever the values are.
3. Quality on the committed labelled set (`tests/data/knowledge/`, written before any
   retrieval code and not tuned against): recall@3 and precision@3 per mode, and how often
   nothing was retrieved for the messages that have no relevant document. precision@3 is the
   share of the documents retrieved (at most 3) that are relevant — what a user pays for in
   tokens; recall@3 is over the messages that have a relevant document.
4. The share of input tokens read from the prompt cache on the second turn (the caching fake
   model's usage figures), with the labelled corpus's ADRs as stable documents.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.common import peak_rss_mib, percentile, reference_ms
from gateway.app.app import App
from gateway.app.config import Config, Secrets, Settings
from gateway.core.clock import SystemClock
from gateway.knowledge.embed_threads import FRESH_S, WINDOW_S
from gateway.knowledge.feature import KnowledgeFeature
from gateway.knowledge.indexer import Indexer
from gateway.knowledge.local_embedder import open_local_embedder
from gateway.knowledge.retrieval import Mode, Retriever
from gateway.knowledge.rules import PathRules
from gateway.knowledge.settings import KnowledgeSection
from tests.fakes.caching_llm import CachingLLM, cache_share
from tests.fakes.channel import MemoryChannel, inbound
from vault.db import Vault
from vault.knowledge import KnowledgeStore
from vault.migrations import migrate

ROOT = Path(__file__).resolve().parent.parent
LABELLED = ROOT / "tests/data/knowledge"
TYPES = ["adr", "rfc", "runbook", "decision", "note"]
_SYLLABLE_TEXT = "ka lo mi ren tor vas pel dun sri bex qua mo fin gal hur zet nop ril sa ty"
SYLLABLES = _SYLLABLE_TEXT.split()


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def generate(root: Path, count: int, rng: random.Random) -> list[list[str]]:
    """`count` documents of ~5 KB; returns each document's words (for the queries)."""
    words = vocabulary(rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]  # Zipf-like
    kept: list[list[str]] = []
    for n in range(count):
        doc_words = rng.choices(words, weights, k=700)
        kind = rng.choice(TYPES)
        sections = []
        for s in range(rng.randint(4, 8)):
            part = doc_words[s * 80 : (s + 1) * 80]
            paragraphs = [" ".join(part[i : i + 40]) + "." for i in range(0, len(part), 40)]
            sections.append(f"## Section {s}: {part[0]} {part[1]}\n\n" + "\n\n".join(paragraphs))
        text = (
            f"---\ntype: {kind}\nstatus: accepted\n---\n# Doc {n}: {doc_words[0]} {doc_words[1]}"
            f"\n\n" + "\n\n".join(sections) + "\n"
        )
        folder = root / kind
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc-{n:05d}.md").write_text(text)
        kept.append(doc_words)
    return kept


def settings(globs: list[str]) -> KnowledgeSection:
    return KnowledgeSection(documents=tuple(globs))


async def index_generated(args: argparse.Namespace, work: Path) -> None:
    rng = random.Random(42)
    docs_root = work / "generated"
    words = generate(docs_root, args.documents, rng)
    size = sum(p.stat().st_size for p in docs_root.rglob("*.md"))
    print(f"generated {args.documents} documents, {size / 1e6:.1f} MB")
    async with Vault(work / "bench.db") as vault:
        await migrate(vault)
        store = KnowledgeStore(vault)
        indexer = Indexer(store=store, settings=settings(["**/*.md"]), base=docs_root,
                          rules=PathRules({}, {}), clock=SystemClock())  # fmt: skip
        started = time.perf_counter()
        report = await indexer.scan()
        wall = time.perf_counter() - started
        chunks = int(await vault.scalar("SELECT count(*) FROM knowledge_chunks"))
        print(
            f"index: {report.indexed} documents, {chunks} chunks in {wall:.2f} s "
            f"({report.indexed / wall:.0f} documents/s); peak RSS {peak_rss_mib():.0f} MiB"
        )
        started = time.perf_counter()
        await indexer.scan()
        print(f"rescan with nothing changed: {(time.perf_counter() - started) * 1000:.0f} ms")
        queries = [" ".join(rng.sample(w[:200], 4)) for w in rng.sample(words, args.queries)]
        await latency(Retriever(store), queries, Mode.LEXICAL)
        embedder = open_local_embedder()
        if embedder is None:
            print("semantic: the `semantic` extra is not installed; skipped")
            return
        sample = [r[0] for r in await vault.fetchall("SELECT text FROM knowledge_chunks LIMIT 16")]
        started = time.perf_counter()
        await embedder.embed(sample, query=False)
        per_chunk = (time.perf_counter() - started) / len(sample)
        print(
            f"embedding: {per_chunk * 1000:.0f} ms per chunk ({1 / per_chunk:.1f} chunks/s); "
            f"the whole index would take ~{per_chunk * chunks / 60:.0f} min (not done here)"
        )
        import numpy as np  # the extra is installed

        vectors = np.random.default_rng(1).standard_normal((chunks, embedder.dim)).astype("<f4")
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        hashes = [r[0] for r in await vault.fetchall("SELECT hash FROM knowledge_chunks")]
        await store.put_vectors(
            embedder.model, [(h, v.tobytes()) for h, v in zip(hashes, vectors, strict=True)]
        )
        for mode in (Mode.SEMANTIC, Mode.HYBRID):
            # A model of its own per mode: the embedder keeps recent query vectors, and the
            # second pass must not be served the first one's.
            retriever = Retriever(store, open_local_embedder())
            await warm_up(retriever)
            await latency(retriever, queries, mode)
        # A turn as the knowledge provider makes it: the message and the previous one.
        retriever = Retriever(store, open_local_embedder())
        await warm_up(retriever)
        await turn_latency(retriever, queries)
        if args.interleave:
            retriever = Retriever(store, open_local_embedder())
            await warm_up(retriever)
            await interleaved(retriever, queries, args.interleave)
        if args.sporadic:
            for mode in (Mode.SEMANTIC, Mode.HYBRID):
                retriever = Retriever(store, open_local_embedder())
                await warm_up(retriever)
                await sporadic(retriever, queries[: args.sporadic], mode)


async def sporadic(retriever: Retriever, queries: list[str], mode: Mode) -> None:
    """Each query after a pause longer than the thread policy's recent window, as a chat's
    messages mostly come: the policy then judges from a window that spans the pause."""
    times = await timed(retriever, queries, mode, pause=FRESH_S + 0.1)
    print(
        f"sporadic {mode.value:9}: p50 {statistics.median(times):.1f} ms, "
        f"p90 {percentile(times, 90):.1f} ms, max {max(times):.1f} ms over {len(times)} "
        f"queries {FRESH_S + 0.1:.1f} s apart{threads(retriever)}"
    )


async def interleaved(retriever: Retriever, queries: list[str], rounds: int) -> None:
    """Semantic and hybrid taking turns on each query (in a seeded random order), the query
    cache emptied before each search so that each one embeds."""
    cache = getattr(retriever.embedder, "_queries", {})
    order = random.Random(7)
    times: dict[Mode, list[float]] = {Mode.SEMANTIC: [], Mode.HYBRID: []}
    for query in queries * rounds:
        modes = list(times)
        order.shuffle(modes)
        for mode in modes:
            cache.clear()
            started = time.perf_counter()
            await retriever.search(query, set(), mode=mode)
            times[mode].append((time.perf_counter() - started) * 1000)
    for mode, spent in times.items():
        print(
            f"interleaved {mode.value:8}: p50 {statistics.median(spent):.1f} ms, "
            f"p90 {percentile(spent, 90):.1f} ms, p99 {percentile(spent, 99):.1f} ms "
            f"over {len(spent)} searches"
        )


async def warm_up(retriever: Retriever) -> None:
    """Load the model and the vectors, and give the model's thread policy the half second of
    machine history it judges from (`embed_threads.WINDOW_S`), as a gateway that has been
    running has: a fresh model makes its calls of that first half second on one thread."""
    await retriever.search("warm up", set(), mode=Mode.SEMANTIC)
    await asyncio.sleep(WINDOW_S)
    await retriever.search("warm up again", set(), mode=Mode.SEMANTIC)
    runs = getattr(retriever.embedder, "runs", None)
    if runs is not None:
        runs.clear()  # count the timed calls only


async def turn_latency(retriever: Retriever, queries: list[str]) -> None:
    times = []
    for previous, query in itertools.pairwise(queries):
        started = time.perf_counter()
        await retriever.search(query, set(), mode=Mode.HYBRID, earlier=[previous])
        times.append((time.perf_counter() - started) * 1000)
    print(
        f"retrieval turn    : p50 {statistics.median(times):.1f} ms, "
        f"p99 {percentile(times, 99):.1f} ms over {len(times)} turns (hybrid, message + previous)"
        f"{threads(retriever)}"
    )


async def timed(
    retriever: Retriever, queries: list[str], mode: Mode, pause: float = 0.0
) -> list[float]:
    """Milliseconds per search, each after `pause` seconds."""
    times = []
    for query in queries:
        if pause:
            await asyncio.sleep(pause)
        started = time.perf_counter()
        await retriever.search(query, set(), mode=mode)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def latency(retriever: Retriever, queries: list[str], mode: Mode) -> None:
    times = await timed(retriever, queries, mode)
    print(
        f"retrieval {mode.value:8}: p50 {statistics.median(times):.1f} ms, "
        f"p99 {percentile(times, 99):.1f} ms over {len(times)} queries{threads(retriever)}"
    )


def threads(retriever: Retriever) -> str:
    """How many of the local model's calls ran on one thread and on two."""
    runs = getattr(retriever.embedder, "runs", None)
    return f"; model calls by threads {dict(sorted(runs.items()))}" if runs else ""


def manifest_hash() -> str:
    return hashlib.sha256((LABELLED / "MANIFEST.sha256").read_bytes()).hexdigest()


async def quality(work: Path) -> None:
    pairs = [json.loads(line) for line in (LABELLED / "pairs.jsonl").read_text().splitlines()]
    print(f"labelled set: {len(pairs)} pairs, MANIFEST.sha256 sha256 {manifest_hash()}")
    embedder = open_local_embedder()
    async with Vault(work / "quality.db") as vault:
        await migrate(vault)
        store = KnowledgeStore(vault)
        indexer = Indexer(store=store, settings=settings(["**/*.md", "**/*.txt"]),
                          base=LABELLED / "corpus", rules=PathRules({}, {}), clock=SystemClock(),
                          embedder=embedder)  # fmt: skip
        started = time.perf_counter()
        await indexer.scan()
        took = time.perf_counter() - started
        print(f"indexed the labelled corpus (embeddings included) in {took:.1f} s")
        paths = {d.id: d.path for d in await store.visible(set())}
        retriever = Retriever(store, embedder)
        modes = [Mode.LEXICAL] + ([Mode.SEMANTIC, Mode.HYBRID] if embedder else [])
        for mode in modes:
            recalls, precisions, abstained, none_cases = [], [], 0, 0
            by_lang: dict[str, list[float]] = {}
            for pair in pairs:
                got = [
                    paths[h.document]
                    for h in await retriever.search(pair["message"], set(), 3, mode)
                ]
                relevant = set(pair["relevant"])
                hit = len(relevant & set(got))
                if relevant:
                    recalls.append(hit / len(relevant))
                    by_lang.setdefault("en" if pair["lang"] == "en" else "other", []).append(
                        hit / len(relevant)
                    )
                else:
                    none_cases += 1
                    abstained += not got
                if got:
                    precisions.append(hit / len(got))
            langs = ", ".join(f"{k} {statistics.mean(v):.2f}" for k, v in sorted(by_lang.items()))
            print(
                f"quality {mode.value:8}: recall@3 {statistics.mean(recalls):.3f}, "
                f"precision@3 {statistics.mean(precisions):.3f} "
                f"(over {len(precisions)} messages with a result); nothing retrieved for "
                f"{abstained}/{none_cases} messages with no relevant document; "
                f"recall by language: {langs}"
            )


async def cache_figure(work: Path) -> None:
    data = {
        "vault": {"path": str(work / "cache.db")}, "auth": {"allow": ["memory:*"]},
        "context": {"documents": ["**/*.md"], "retrieval": "lexical"},
    }  # fmt: skip
    config = Config(settings=Settings(**data), secrets=Secrets({}), source=None)
    config = replace(config, source=LABELLED / "corpus" / "config.toml")
    llm = CachingLLM()
    async with App(config=config, channels=[MemoryChannel()], llm_override=llm,
                   use_llm_override=True) as app:  # fmt: skip
        app.feature(KnowledgeFeature)
        await app.router.submit(inbound("Why PostgreSQL, and why Kafka rather than RabbitMQ?"))
        await app.router.submit(inbound("And how do I fail over the postgres primary?"))
    first, second = llm.responses
    print(
        f"prompt cache, second turn: {second.cache_read_tokens} of "
        f"{second.cache_read_tokens + second.input_tokens} input tokens read from cache "
        f"({cache_share(second):.0%}); first turn wrote {first.cache_write_tokens}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument(
        "--sporadic", type=int, default=0, metavar="N",
        help="also N semantic and N hybrid queries, each after a pause (about a second each)",
    )  # fmt: skip
    parser.add_argument(
        "--interleave", type=int, default=0, metavar="R",
        help="also semantic and hybrid taking turns query by query, R passes over the queries",
    )  # fmt: skip
    args = parser.parse_args()
    print(f"reference loop: {reference_ms():.0f} ms (python {sys.version.split()[0]})")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        await index_generated(args, work)
        if not args.skip_quality:
            await quality(work)
        await cache_figure(work)


if __name__ == "__main__":
    asyncio.run(main())
