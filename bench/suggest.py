"""Inline suggestions: quality on the labelled set, and the latency a turn gains.

    python -m bench.suggest quality [--set labelled|labelled2|…|labelled7|dev]
        [--semantic]
    python -m bench.suggest latency [--items 10000] [--turns 300] [--semantic] [--in-turn]

quality: every case of `tests/data/suggestions/cases.jsonl` (written and committed before the
ranking was tuned; tuning used `tests/gateway/suggestions/dev_cases.jsonl` only; the second
set, `tests/data/suggestions2/`, was written after the first was scored) gets its own
user and chat in one vault holding the knowledge corpus; its memories, follow-ups and earlier
injections are written, and the finder runs with the default `[suggestions]` settings.
Reported: the share of cases showing a suggestion whose top item is relevant (over the cases
with something relevant), the share of nothing-relevant cases that show anything, with Wilson
95% intervals, and how often the top item had the labelled type.

latency: N items (half documents of ~150 words, half memories of one user) in one vault; the
time of `Finder.find` per turn for generated messages, p50/p99 (lexical; with `--semantic`, the
local model embeds the messages and the memories, the documents' chunks get random vectors).
`--in-turn` first runs, untimed, what a live turn runs before the finder: the context step's
knowledge search for the same message and earlier message (`Retriever.search`, hybrid), which
embeds the message into the embedder's cache the finder shares; the figure is then what the
finder adds to a turn that has documents. Without it, the finder embeds the message itself.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import peak_rss_mib, percentile, reference_ms
from gateway.core.clock import SystemClock
from gateway.core.embedding import Embedder
from gateway.core.messages import ChatKind
from gateway.core.scope import Scope
from gateway.knowledge.indexer import Indexer
from gateway.knowledge.local_embedder import open_local_embedder
from gateway.knowledge.retrieval import Retriever
from gateway.knowledge.rules import PathRules
from gateway.knowledge.settings import KnowledgeSection
from gateway.suggestions.finder import Candidate, Finder
from gateway.suggestions.settings import SuggestionsSection
from tests.fakes.channel import inbound
from vault.conversations import Conversations
from vault.db import Vault
from vault.injections import InjectionLog, NewInjection
from vault.knowledge import KnowledgeStore
from vault.memories import Memories
from vault.migrations import migrate
from vault.proactive.store import ProactiveStore
from vault.suggestions import SuggestionStore

ROOT = Path(__file__).resolve().parent.parent
LABELLED = ROOT / "tests/data/suggestions"
# "labelled" is tests/data/suggestions/, "labelledN" tests/data/suggestionsN/ (each written
# before the finder change it scored).
LABELLED_SETS = {
    "labelled" + folder.name.removeprefix("suggestions"): folder
    for folder in sorted(LABELLED.parent.glob("suggestions*"))
    if (folder / "cases.jsonl").is_file()
}
DEV = ROOT / "tests/gateway/suggestions/dev_cases.jsonl"
CORPUS = ROOT / "tests/data/knowledge/corpus"
DAY_MS = 86_400_000


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def share(k: int, n: int) -> str:
    low, high = wilson(k, n)
    return f"{k}/{n} = {k / max(n, 1):.1%} (Wilson 95% {low:.1%}–{high:.1%})"


@dataclass
class World:
    vault: Vault
    finder: Finder
    conversations: Conversations
    memories: Memories
    intents: ProactiveStore
    injections: InjectionLog
    store: KnowledgeStore


def build_finder(vault: Vault, embedder: Embedder | None) -> World:
    store = KnowledgeStore(vault)
    memories = Memories(vault)
    finder = Finder(knowledge=store, retriever=Retriever(store, embedder),
                    rules=PathRules({}, {}), memories=memories,
                    store=SuggestionStore(vault), embedder=embedder)  # fmt: skip
    return World(vault, finder, Conversations(vault), memories, ProactiveStore(vault),
                 InjectionLog(vault), store)  # fmt: skip


async def scope_for(world: World, key: str, text: str, group: bool, now_ms: int) -> Scope:
    kind = ChatKind.GROUP if group else ChatKind.DM
    message = inbound(text, chat=f"c-{key}", user=f"u-{key}", kind=kind)
    recorded = await world.conversations.record_inbound(message, kind="chat", tokens=1,
                                                        now_ms=now_ms)  # fmt: skip
    assert recorded is not None
    return Scope(user=message.user, chat=message.chat, user_pk=recorded.user_pk,
                 chat_pk=recorded.chat_pk, session_pk=recorded.session_pk,
                 message_pk=recorded.message_pk, text=text, now_ms=now_ms,
                 in_group=group)  # fmt: skip


async def run_case(
    world: World, case: dict[str, Any], paths: dict[str, int], settings: SuggestionsSection
) -> list[str]:
    """The labelled keys of what the finder shows for one case, best first."""
    now = int(time.time() * 1000)
    *earlier, current = case["conversation"]
    scope = await scope_for(world, case["id"], current, case["chat"] == "group", now)
    keys: dict[str, str] = {}
    for n, text in enumerate(case["memories"]):
        memory = await world.memories.remember(scope.user_pk, text, now - 30 * DAY_MS)
        keys[f"memory:{memory}"] = f"memory:{n}"
    for n, what in enumerate(case["followups"]):
        intent = await world.intents.add_intent(
            chat=scope.chat_pk, user=scope.user_pk, what=what, why="", confidence=0.8,
            kind="ai", exact_time=False, execute_at=now + DAY_MS, now_ms=now - DAY_MS,
        )  # fmt: skip
        keys[f"followup:{intent}"] = f"followup:{n}"
    old = [
        NewInjection(session=scope.session_pk, chat=scope.chat_pk, document=paths[p],
                     content_hash="0" * 64, snapshot=hashlib.sha256(p.encode()).hexdigest(),
                     text=f"old version of {p}", tokens=5, reason="relevant",
                     at_ms=now - 3 * DAY_MS)
        for p in case["changed"]
    ]  # fmt: skip
    await world.injections.record(old)
    for path, doc in paths.items():
        keys[f"doc:{doc}"] = f"doc:{path}"
    found = await world.finder.find(scope, current, recent=earlier,
                                    limit=settings.max_per_turn,
                                    min_relevance=settings.min_relevance)  # fmt: skip
    return [keys[c.key] + f"@{c.type.value}" for c in found]


def labels(case: dict[str, Any]) -> tuple[set[str], dict[str, str]]:
    """The relevant keys (`doc:`/`memory:`/`followup:`) and the type each should have."""
    relevant: set[str] = set()
    types: dict[str, str] = {}
    for key in case["relevant"]:
        kind, _, ref = key.partition(":")
        if kind == "warning":
            relevant.add(f"doc:{ref}")
            types[f"doc:{ref}"] = "warning"
        else:
            relevant.add(key)
            if kind == "doc" and ref in case["changed"]:
                types[key] = "change"
            elif kind in ("memory", "followup"):
                types[key] = kind
    return relevant, types


async def quality(args: argparse.Namespace, work: Path) -> None:
    folder = LABELLED_SETS.get(args.set)
    source = DEV if folder is None else folder / "cases.jsonl"
    cases = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    if folder is not None:
        manifest = hashlib.sha256((folder / "MANIFEST.sha256").read_bytes()).hexdigest()
        print(f"{args.set} set: {len(cases)} cases, MANIFEST.sha256 sha256 {manifest}")
    else:
        print(f"development set: {len(cases)} cases")
    embedder = open_local_embedder() if args.semantic else None
    if args.semantic and embedder is None:
        sys.exit("the `semantic` extra is not installed")
    settings = SuggestionsSection()
    async with Vault(work / "quality.db") as vault:
        await migrate(vault)
        world = build_finder(vault, embedder)
        indexer = Indexer(store=world.store,
                          settings=KnowledgeSection(documents=("**/*.md", "**/*.txt")),
                          base=CORPUS, rules=PathRules({}, {}), clock=SystemClock(),
                          embedder=embedder)  # fmt: skip
        await indexer.scan()
        paths = {d.path: d.id for d in await world.store.visible(set())}
        shown = top_ok = with_relevant = quiet_shown = quiet = typed = typed_ok = 0
        misses: list[str] = []
        for case in cases:
            got = await run_case(world, case, paths, settings)
            relevant, types = labels(case)
            top = got[0].rsplit("@", 1) if got else None
            if relevant:
                with_relevant += 1
                if top is not None:
                    shown += 1
                    top_ok += top[0] in relevant
                    if top[0] not in relevant:
                        misses.append(f"{case['id']}: top {top[0]} not in {sorted(relevant)}")
                    if top[0] in types:
                        typed += 1
                        typed_ok += top[1] == types[top[0]]
            else:
                quiet += 1
                if top is not None:
                    quiet_shown += 1
                    misses.append(f"{case['id']}: nothing relevant, showed {got}")
        mode = "semantic+lexical" if embedder else "lexical"
        print(f"mode {mode}, min_relevance {settings.min_relevance}, "
              f"max_per_turn {settings.max_per_turn}")  # fmt: skip
        print(f"top suggestion relevant when shown: {share(top_ok, shown)}")
        print(
            f"cases with something relevant that showed a suggestion: {share(shown, with_relevant)}"
        )
        print(f"nothing-relevant cases that showed a suggestion: {share(quiet_shown, quiet)}")
        print(f"top item of the labelled type (change/warning/memory/follow-up): "
              f"{share(typed_ok, typed)}")  # fmt: skip
        if args.verbose:
            print("\n".join(misses))


_WORD_TEXT = (
    "deploy rollback canary kafka consumer lag postgres failover replica backup restore disk "
    "redis eviction secret rotation search cluster shard certificate renewal dns carrier label "
    "invoice billing pricing shipment tracking warehouse pickup courier mobile release store "
    "oncall paging incident severity outage checkout payment provider webhook signature retry "
    "grpc feature flag login timestamp timezone monorepo typing review onboarding laptop office "
    "printer holiday leave travel expense hotel train budget retention deletion cache pipeline"
)
WORDS = _WORD_TEXT.split()


_SYLLABLE_TEXT = "ka lo mi ren tor vas pel dun sri bex qua mo fin gal hur zet nop ril sa ty"
SYLLABLES = _SYLLABLE_TEXT.split()


def vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    """Made-up words (`filler` draws them Zipf-like: a few common, most rare)."""
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def filler(rng: random.Random, vocab: list[str], n: int) -> str:
    """`n` words: one in five a team word of `WORDS` (with a suffix), the rest drawn Zipf-like
    from `vocab` (weight 1/rank, as `bench/knowledge.py` draws its corpus)."""
    out = []
    for word in rng.choices(vocab, cum_weights=_zipf(len(vocab)), k=n):
        if rng.random() < 0.2:
            word = rng.choice(WORDS) + rng.choice(("", "s", "ing", "ed"))
        out.append(word)
    return " ".join(out)


_WEIGHTS: dict[int, list[float]] = {}


def _zipf(size: int) -> list[float]:
    if size not in _WEIGHTS:
        _WEIGHTS[size] = list(itertools.accumulate(1 / (rank + 1) for rank in range(size)))
    return _WEIGHTS[size]


async def latency(args: argparse.Namespace, work: Path) -> None:
    rng = random.Random(7)
    vocab = vocabulary(rng)
    rng.shuffle(vocab)
    embedder = open_local_embedder() if args.semantic else None
    if args.semantic and embedder is None:
        sys.exit("the `semantic` extra is not installed")
    docs_root = work / "docs"
    half = args.items // 2
    for n in range(half):
        path = docs_root / f"d{n // 500}" / f"doc{n}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {filler(rng, vocab, 4).title()}\n\n{filler(rng, vocab, 150)}\n")
    async with Vault(work / "latency.db") as vault:
        await migrate(vault)
        world = build_finder(vault, None)
        indexer = Indexer(store=world.store, settings=KnowledgeSection(documents=("**/*.md",)),
                          base=docs_root, rules=PathRules({}, {}), clock=SystemClock())  # fmt: skip
        await indexer.scan()
        now = int(time.time() * 1000)
        scope = await scope_for(world, "bench", "hello", False, now)
        for _ in range(args.items - half):
            await world.memories.remember(scope.user_pk, filler(rng, vocab, 12), now - DAY_MS)
        if embedder is not None:
            import numpy as np  # the extra is installed

            rows = await vault.fetchall("SELECT hash FROM knowledge_chunks")
            vectors = np.random.default_rng(1).standard_normal((len(rows), embedder.dim))
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            await world.store.put_vectors(
                embedder.model,
                [(r[0], v.astype("<f4").tobytes()) for r, v in zip(rows, vectors, strict=True)],
            )
            world = build_finder(vault, embedder)
        settings = SuggestionsSection()
        messages = [filler(rng, vocab, rng.randint(4, 16)) for _ in range(args.turns)]
        for text in messages[:10]:  # warm: caches, the model's first call
            await world.finder.find(scope, text, min_relevance=settings.min_relevance)
        times: list[float] = []
        found: list[list[Candidate]] = []
        for text in messages:
            if args.in_turn:  # the context step before the reply: it embeds the message
                await world.finder.retriever.search(text, set(), 5, earlier=messages[:1])
            started = time.perf_counter()
            found.append(await world.finder.find(scope, text, recent=messages[:1],
                                                 limit=settings.max_per_turn,
                                                 min_relevance=settings.min_relevance))  # fmt: skip
            times.append((time.perf_counter() - started) * 1000)
        mode = "semantic+lexical" if embedder else "lexical"
        mode += ", in a turn (the context step embedded the message)" if args.in_turn else ""
        nonempty = sum(1 for f in found if f)
        p50, p99 = percentile(times, 50), percentile(times, 99)
        print(f"{args.items} items ({half} documents, {args.items - half} memories), {mode}: "
              f"find per turn p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(times):.1f} ms "
              f"over {len(times)} turns ({nonempty} with a suggestion); peak RSS "
              f"{peak_rss_mib():.0f} MiB; reference loop {reference_ms():.0f} ms")  # fmt: skip


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--set", choices=(*LABELLED_SETS, "dev"), default="dev")
    q.add_argument("--semantic", action="store_true")
    q.add_argument("--verbose", action="store_true")
    lat = sub.add_parser("latency")
    lat.add_argument("--items", type=int, default=10_000)
    lat.add_argument("--turns", type=int, default=300)
    lat.add_argument("--semantic", action="store_true")
    lat.add_argument("--in-turn", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.what == "quality":
            await quality(args, Path(tmp))
        else:
            await latency(args, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
