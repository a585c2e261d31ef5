"""Evaluate the context analyzer on labelled conversations and time it per message.

    python -m bench.analyzer_eval                     # development sets, both modes
    python -m bench.analyzer_eval --scan              # the threshold-selection rule, on them
    python -m bench.analyzer_eval --loso              # the rule on all sets but one, each in turn
    python -m bench.analyzer_eval --speed             # latency, model load time, memory
    python -m bench.analyzer_eval --speed --cooldowns # the same with a live chat's cooldowns
    python -m bench.analyzer_eval FILE.jsonl ...      # any labelled set (e.g. the blind set)
    python -m bench.analyzer_eval --earlier [--cache F] # tips on the messages before the last

Development data: `analyzer_cases.jsonl`, `analyzer_holdout.jsonl`, `analyzer_holdout2.jsonl`,
`analyzer_blind/cases.jsonl` and `analyzer_blind2/` to `analyzer_blind17/` (`cases.jsonl`; the
blind sets are development data since their one scoring), and `analyzer_train1/` to
`analyzer_train12/` (written as training data for the learned models).
The threshold-selection rule is `analyzer_select.py`'s: best topic-shift F1 with at most 3%
false tips on the development set, per mode (semantic: the threshold and the cue bonus
jointly); frustration similarity: best F1 with precision at least 0.97. `--loso` applies it
to every set but one and scores the one left out, for each in turn.

Quality: the last message of each conversation is judged with the earlier ones as history.
Semantic mode uses the learned models (`gateway/analyzer/learned.py`, trained by
`analyzer_train.py`) when they match the model; `--similarity` judges with the similarity
thresholds instead (`--scan` and `--loso` always do: they choose those thresholds).
Precision/recall/F1 for frustration (expect "compact") and topic shift (expect "clear"), and
the false-tip rate on conversations labelled "none", each with a Wilson 95% interval, overall
and per language (`lang`, "en" when absent). Two modes: semantic (the local model of the
`semantic` extra) and lexical (the fallback). No confirmation model is involved.

Earlier messages (`--earlier`): the messages before the last of each conversation, judged as
a live chat judges them (past the session's first messages, cooldowns after a tip), each
counted as a false tip when it gets one: they are context written to lead up to the last
message. `--cache` serves the vectors `analyzer_train.py --cache` kept.

Speed: every message of every case judged the way a live chat does it (embed what a verdict
needs, analyze, advance the window), p50/p99 per message; the model's load time; peak traced
memory of the lexical pass and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import statistics
import struct
import sys
import time
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from bench import analyzer_select as sel
from gateway.analyzer.detect import Analysis, Params, advance, analyze, judge_conversation
from gateway.analyzer.lazy import judge_lazily, pending_text, session_vectors
from gateway.analyzer.learned import load as load_learned
from gateway.analyzer.semantic import MAX_EMBED_CHARS, SemanticSide, floats, pack, unpack
from gateway.analyzer.settings import AnalyzerSection
from gateway.analyzer.state import WatchState
from gateway.analyzer.watcher import MIN_SESSION_MESSAGES
from gateway.core.embedding import Embedder
from gateway.knowledge.local_embedder import open_local_embedder

DATA = Path(__file__).resolve().parent.parent / "tests/data"
DEV = [
    DATA / "analyzer_cases.jsonl",
    DATA / "analyzer_holdout.jsonl",
    DATA / "analyzer_holdout2.jsonl",
    DATA / "analyzer_blind/cases.jsonl",  # scored once, then retired to development data
    DATA / "analyzer_blind2/cases.jsonl",  # the same
    DATA / "analyzer_blind3/cases.jsonl",  # the same
    DATA / "analyzer_blind4/cases.jsonl",  # the same
    DATA / "analyzer_blind5/cases.jsonl",  # the same
    DATA / "analyzer_blind6/cases.jsonl",  # the same (the learned models' first blind set)
    DATA / "analyzer_blind7/cases.jsonl",  # the same
    DATA / "analyzer_blind8/cases.jsonl",  # the same
    DATA / "analyzer_blind9/cases.jsonl",  # the same (the structural rules as features)
    DATA / "analyzer_blind10/cases.jsonl",  # the same
    DATA / "analyzer_blind11/cases.jsonl",  # the same
    DATA / "analyzer_blind12/cases.jsonl",  # the same
    DATA / "analyzer_blind13/cases.jsonl",  # the same
    DATA / "analyzer_blind14/cases.jsonl",  # the same (the shipped models were not retrained)
    DATA / "analyzer_blind15/cases.jsonl",  # the same
    DATA / "analyzer_blind16/cases.jsonl",  # the same
    DATA / "analyzer_blind17/cases.jsonl",  # the same (the shipped models were not retrained)
    DATA / "analyzer_train1/cases.jsonl",  # written for training the learned models
    DATA / "analyzer_train2/cases.jsonl",  # the same
    DATA / "analyzer_train3/cases.jsonl",  # the same
    DATA / "analyzer_train4/cases.jsonl",  # the same
    DATA / "analyzer_train5/cases.jsonl",  # the same
    DATA / "analyzer_train6/cases.jsonl",  # the same
    DATA / "analyzer_train7/cases.jsonl",  # the same, cues balanced between shifts and not
    DATA / "analyzer_train8/cases.jsonl",  # the same
    DATA / "analyzer_train9/cases.jsonl",  # the same
    DATA / "analyzer_train10/cases.jsonl",  # the same, after set 10's misses
    DATA / "analyzer_train11/cases.jsonl",  # the same
    DATA / "analyzer_train12/cases.jsonl",  # the same, after sets 14 and 15's misses
]
WINDOW = 4
COOLDOWN_MESSAGES = AnalyzerSection().cooldown_messages
Vec = tuple[float, ...]


def load(path: Path) -> list[dict[str, Any]]:
    """The cases of a JSONL file; "no tip" is written `"none"` or `null` (blind set 4)."""
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    for case in cases:
        case["expect"] = case["expect"] or "none"
    return cases


def wilson(hits: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    z, p = 1.96, hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


async def embed_all(side: SemanticSide, texts: Sequence[str]) -> dict[str, Vec]:
    assert side.embedder is not None
    await side.embed("warm-up")  # loads the model and the complaint vectors
    unique = list(dict.fromkeys(texts))
    out: dict[str, Vec] = {}
    for start in range(0, len(unique), 32):
        batch = unique[start : start + 32]
        found = await side.embedder.embed(batch, query=True)
        out.update(zip(batch, (floats(v) for v in found), strict=True))
    return out


def stored(vector: Vec) -> Vec:
    return unpack(pack(vector)) or vector


class Judge:
    def __init__(self, side: SemanticSide | None, vectors: dict[str, Vec] | None) -> None:
        self.side, self.vectors = side, vectors

    def complaint(self, messages: Sequence[str]) -> float | None:
        """The last message's similarity to the generic complaints (semantic mode)."""
        if self.side is None or self.vectors is None:
            return None
        return self.side.complaint_similarity(self.vectors[messages[-1]])

    def __call__(self, messages: list[str], params: Params) -> Analysis:
        if self.side is None or self.vectors is None:
            return judge_conversation(messages, params, WINDOW)
        # the earlier messages' vectors as a session's stored state keeps them (int8)
        vectors = [*(stored(self.vectors[m]) for m in messages[:-1]), self.vectors[messages[-1]]]
        complaint = self.complaint(messages)
        return judge_conversation(messages, params, WINDOW, vectors=vectors, complaint=complaint)


def tally(cases: list[dict[str, Any]], judged: list[Analysis]) -> dict[str, list[int]]:
    t = {"frustration": [0, 0, 0], "clear": [0, 0, 0], "false_tips": [0, 0]}
    for case, analysis in zip(cases, judged, strict=True):
        expect, got = case["expect"], analysis.suggestion or "none"
        for label, truth, pred in (
            ("frustration", expect == "compact", analysis.frustration),
            ("clear", expect == "clear", got == "clear"),
        ):
            t[label][0] += truth and pred
            t[label][1] += pred and not truth
            t[label][2] += truth and not pred
        if expect == "none":
            t["false_tips"][1] += 1
            t["false_tips"][0] += got != "none"
    return t


def interval(hits: int, n: int) -> str:
    low, high = wilson(hits, n)
    return f"{hits}/{n} = {hits / n if n else 0:.2f} [{low:.2f}, {high:.2f}]"


def report(name: str, t: dict[str, list[int]]) -> None:
    print(f"  {name}")
    for label in ("frustration", "clear"):
        tp, fp, fn = t[label]
        _, _, f1 = sel.prf(tp, fp, fn)
        print(
            f"    {'topic shift' if label == 'clear' else label:12} "
            f"P {interval(tp, tp + fp)}  R {interval(tp, tp + fn)}  F1 {f1:.2f}"
        )
    print(f"    false tips   {interval(*t['false_tips'])}")


def quality(cases: list[dict[str, Any]], judge: Judge, params: Params, verbose: bool) -> None:
    judged = [judge(list(c["messages"]), params) for c in cases]
    report("all", tally(cases, judged))
    by_lang: dict[str, list[int]] = defaultdict(list)
    for index, case in enumerate(cases):
        by_lang[case.get("lang", "en")].append(index)
    if len(by_lang) > 1:
        groups = [["en"], sorted(set(by_lang) - {"en"})]
        groups += [[lang] for lang in sorted(by_lang) if lang != "en"]  # each language
        for group in groups:
            chosen = [i for lang in group for i in by_lang.get(lang, [])]
            label = group[0] if len(group) == 1 else "not en (" + ", ".join(group) + ")"
            report(label, tally([cases[i] for i in chosen], [judged[i] for i in chosen]))
    if verbose:
        for case, analysis in zip(cases, judged, strict=True):
            got = analysis.suggestion or "none"
            if got != case["expect"]:
                score = "-" if analysis.score is None else f"{analysis.score:.3f}"
                print(f"    miss {case['id']}: {case['expect']} -> {got} ({score})")


def scored(cases: list[dict[str, Any]], judge: Judge, params: Params) -> list[sel.Scored]:
    analyses = [judge(list(c["messages"]), params) for c in cases]
    return sel.prepare(cases, analyses, [judge.complaint(c["messages"]) for c in cases])


def describe(params: Params, semantic: bool) -> str:
    if semantic:
        return (
            f"semantic_threshold {params.semantic_threshold}, cue_bonus {params.cue_bonus},"
            f" complaint_threshold {params.complaint_threshold}"
        )
    return f"threshold {params.threshold}"


def scan(cases: list[dict[str, Any]], judge: Judge, base: Params, semantic: bool) -> Params:
    """The threshold-selection rule (`analyzer_select.py`) on these cases."""
    chosen = sel.select(scored(cases, judge, base), base, semantic)
    print(f"  chosen: {describe(chosen, semantic)}")
    return chosen


def leave_one_out(
    groups: dict[str, list[dict[str, Any]]], judge: Judge, base: Params, semantic: bool
) -> None:
    """The rule applied to every set but one, scored on the one left out, for each in turn."""
    sets = {name: scored(cases, judge, base) for name, cases in groups.items()}
    for name, chosen, t in sel.leave_one_out(sets, base, semantic):
        print(f"  held out {name}: chosen {describe(chosen, semantic)}")
        report(name, t)


# --- speed ---------------------------------------------------------------------------------


async def live_pass(
    conversations: list[list[str]],
    side: SemanticSide | None,
    params: Params,
    timings: list[float],
    cache: dict[str, bytes] | None = None,
    cooldowns: bool = False,
    earlier_tips: list[tuple[tuple[str, ...], str | None]] | None = None,
) -> None:
    """Every message judged as a live chat judges it; without `cooldowns` every verdict counts,
    with them none is needed (so nothing embedded) while a live session would be cooling down:
    its first `MIN_SESSION_MESSAGES` messages and `COOLDOWN_MESSAGES` after a tip.
    `earlier_tips` collects the tip (or None) of every message but the last of a conversation
    that was judged outside a cooldown, with the conversation up to it."""
    for messages in conversations:
        state = WatchState()
        for position, text in enumerate(messages):
            if side is not None and cache is not None:
                cache.clear()  # every live message is new text: no cached vector
            started = time.perf_counter_ns()
            cooling = cooldowns and (
                state.messages < MIN_SESSION_MESSAGES
                or (
                    state.last_suggestion_at is not None
                    and state.messages - state.last_suggestion_at < COOLDOWN_MESSAGES
                )
            )
            if side is None:
                analysis = analyze(text, state.recent, params)
            else:
                judged = await judge_lazily(
                    side,
                    text,
                    state.recent,
                    params,
                    partial(session_vectors, side, state),
                    cooling=cooling,
                )
                analysis = judged.analysis
                assert side.model is not None
                if judged.vector is not None:
                    entry = (pack(judged.vector), judged.vector)
                    state.with_vector(side.model, entry, WINDOW)
                elif judged.deferred:
                    state.with_vector(side.model, pending_text(text), WINDOW)
            state.recent = advance(state.recent, analysis.keywords, WINDOW)
            if earlier_tips is not None and not cooling and position < len(messages) - 1:
                earlier_tips.append((tuple(messages[: position + 1]), analysis.suggestion))
            if analysis.suggestion is not None and not cooling:
                state.last_suggestion_at = state.messages
            state.messages += 1
            timings.append((time.perf_counter_ns() - started) / 1e6)


class Served:
    """An `Embedder` serving the vectors kept by `analyzer_train.py --cache` (keyed by message
    text), the local model for any other text."""

    def __init__(self, inner: Embedder, kept: dict[str, Vec]) -> None:
        self.inner, self.model, self.dim = inner, inner.model, inner.dim
        self.kept = {text[:MAX_EMBED_CHARS]: vector for text, vector in kept.items()}

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        missing = [t for t in texts if t not in self.kept]
        found = dict(zip(missing, await self.inner.embed(missing, query=query), strict=True))
        return [
            found[t] if t in found else struct.pack(f"<{self.dim}f", *self.kept[t]) for t in texts
        ]


async def earlier_messages(
    groups: dict[str, list[dict[str, Any]]], side: SemanticSide | None, params: Params
) -> None:
    """Tips on the messages before the last of each conversation, judged as a live chat judges
    them (its cooldowns included). Those messages are unlabelled context written to lead up to
    the last one, so each tip there is counted as a false one (an upper bound: now and then a
    context message may itself change the subject). Conversations about one subject often
    share their opening, so each distinct message-in-its-context counts once (the first set
    it appears in has it); the count over every conversation follows."""
    seen: set[tuple[str, ...]] = set()
    distinct: list[str | None] = []
    every: list[str | None] = []
    for name, cases in groups.items():
        shown: list[tuple[tuple[str, ...], str | None]] = []
        conversations = [list(c["messages"]) for c in cases]
        await live_pass(conversations, side, params, [], None, True, shown)
        every += [tip for _, tip in shown]
        mine = []
        for context, tip in shown:
            if context not in seen:
                seen.add(context)
                mine.append(tip)
        distinct += mine
        tips = [t for t in mine if t is not None]
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(Counter(tips).items()))
        print(f"  {name:32} tips {interval(len(tips), len(mine))}  {kinds}")
    tips = [t for t in distinct if t is not None]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(Counter(tips).items()))
    print(f"  {'all, each distinct once':32} tips {interval(len(tips), len(distinct))}  {kinds}")
    counted = sum(t is not None for t in every)
    print(f"  {'every conversation':32} tips {interval(counted, len(every))}")


class Counting:
    """An `Embedder` that counts the texts it is given."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.texts = inner, 0
        self.model, self.dim = inner.model, inner.dim

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        self.texts += len(texts)
        return await self.inner.embed(texts, query=query)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def speed(
    cases: list[dict[str, Any]], params: Params, cooldowns: bool, *, learned: bool = True
) -> None:
    conversations = [list(c["messages"]) for c in cases]
    timings: list[float] = []
    await live_pass(conversations, None, params, [])
    for _ in range(10):
        await live_pass(conversations, None, params, timings)
    tracemalloc.start()
    await live_pass(conversations, None, params, [])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"lexical: p50 {statistics.median(timings):.3f} ms, p99 {percentile(timings, 0.99):.3f} ms"
        f" per message over {len(timings)}; peak traced memory {peak / 1024:.0f} KiB"
    )
    embedder = open_local_embedder()
    if embedder is None:
        print("semantic: the extra is not installed")
        return
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    counting = Counting(embedder)
    side = SemanticSide(counting)
    started = time.perf_counter()
    await side.embed("load the model")
    load_s = time.perf_counter() - started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    timings = []
    counting.texts = 0
    cpu = time.process_time()
    semantic = replace(params, learned=load_learned(side.model) if learned else None)
    await live_pass(conversations, side, semantic, timings, embedder._queries, cooldowns)
    cpu_ms = (time.process_time() - cpu) * 1000 / len(timings)
    print(
        f"semantic{' with live cooldowns' if cooldowns else ''}:"
        f" p50 {statistics.median(timings):.2f} ms, p99 {percentile(timings, 0.99):.2f}"
        f" ms per message over {len(timings)} (embedding included: {counting.texts} texts embedded,"
        f" only what a verdict needed), CPU {cpu_ms:.1f} ms per message (mean, all threads);"
        f" model load and complaint"
        f" vectors {load_s * 1000:.0f} ms; peak RSS {rss_before / 1024:.0f} -> "
        f"{rss_after / 1024:.0f} MiB after loading"
    )


async def earlier_pass(
    groups: dict[str, list[dict[str, Any]]],
    embedder: Embedder | None,
    mode: str,
    cache: Path | None,
    learned: bool,
) -> None:
    params = Params()
    if mode != "semantic":
        print("mode lexical")
        await earlier_messages(groups, None, params)
    if embedder is not None:
        from bench.analyzer_train import read_cache  # it imports this module

        kept = read_cache(cache, embedder.model) if cache is not None else {}
        side = SemanticSide(Served(embedder, kept))
        await side.warm()
        semantic = replace(params, learned=load_learned(embedder.model) if learned else None)
        print(f"mode semantic{'' if learned else ' (similarity thresholds)'}")
        await earlier_messages(groups, side, semantic)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", type=Path, default=DEV)
    parser.add_argument("--verbose", action="store_true", help="list every misjudged case")
    parser.add_argument("--scan", action="store_true", help="apply the threshold rule")
    parser.add_argument(
        "--loso", action="store_true", help="the rule on all sets but one, for each in turn"
    )
    parser.add_argument("--speed", action="store_true", help="latency, load time, memory")
    parser.add_argument(
        "--cooldowns",
        action="store_true",
        help="--speed as a live chat: nothing embedded while a session cools down",
    )
    parser.add_argument(
        "--cache", type=Path, help="with --earlier: the vectors kept by analyzer_train --cache"
    )
    parser.add_argument(
        "--earlier",
        action="store_true",
        help="tips on the messages before the last, as a live chat judges them (cooldowns)",
    )
    parser.add_argument("--mode", choices=("both", "semantic", "lexical"), default="both")
    parser.add_argument(
        "--similarity",
        action="store_true",
        help="semantic mode without the learned models (the similarity thresholds)",
    )
    args = parser.parse_args()
    groups = {str(path.relative_to(DATA) if path.is_relative_to(DATA) else path): load(path)
              for path in args.cases}  # fmt: skip
    cases = [c for group in groups.values() for c in group]
    print(f"{len(cases)} cases from {', '.join(p.name for p in args.cases)}")
    params = Params()
    if args.speed:
        await speed(cases, params, args.cooldowns, learned=not args.similarity)
        return 0
    embedder = open_local_embedder() if args.mode != "lexical" else None
    if args.earlier:
        await earlier_pass(groups, embedder, args.mode, args.cache, not args.similarity)
        return 0
    modes: list[tuple[str, Judge]] = []
    if args.mode != "semantic":
        modes.append(("lexical", Judge(None, None)))
    if embedder is not None:
        side = SemanticSide(embedder)
        vectors = await embed_all(side, [m for c in cases for m in c["messages"]])
        modes.append(("semantic", Judge(side, vectors)))
    for name, judge in modes:
        print(f"mode {name}")
        if args.loso:
            leave_one_out(groups, judge, params, name == "semantic")
        elif args.scan:
            scan(cases, judge, params, name == "semantic")
        elif judge.side is not None and not args.similarity:
            learned = load_learned(judge.side.model)
            print(f"  learned models: {'yes' if learned is not None else 'none for this model'}")
            quality(cases, judge, replace(params, learned=learned), args.verbose)
        else:
            quality(cases, judge, params, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
