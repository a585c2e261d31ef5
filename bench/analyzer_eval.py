"""Evaluate the context analyzer on the labelled cases and time it per message.

    python bench/analyzer_eval.py [FILE.jsonl ...] [--verbose]
    python bench/analyzer_eval.py tests/data/analyzer_cases.jsonl \
        tests/data/analyzer_holdout.jsonl tests/data/analyzer_holdout2.jsonl

The rules are developed against `analyzer_cases.jsonl`. `analyzer_holdout.jsonl` was written
after the first version of the rules was frozen (and has been seen since);
`analyzer_holdout2.jsonl` was written after the second version was frozen and must not be
used for tuning: its figures are the honest estimate.

Quality: precision/recall/F1 for frustration (expect "compact") and topic shift (expect
"clear"), and the false-suggestion rate on conversations that should get no tip. Speed: every
message of every case is judged the way a live chat does it (analyze, then advance the
recent-keywords window), repeated to get stable figures: median, p99, throughput, and the
peak memory of one pass.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from gateway.analyzer.detect import Params, advance, analyze, judge_conversation

DEFAULT_CASES = Path(__file__).resolve().parent.parent / "tests/data/analyzer_cases.jsonl"
ROUNDS = 30
WINDOW = 4


def load(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def quality(cases: list[dict[str, object]], verbose: bool) -> None:
    counts = {"frustration": [0, 0, 0], "clear": [0, 0, 0]}  # tp, fp, fn
    negatives = false_tips = 0
    for case in cases:
        messages = case["messages"]
        assert isinstance(messages, list)
        analysis = judge_conversation(messages, Params(), WINDOW)
        expect, got = case["expect"], analysis.suggestion or "none"
        for label, truth, pred in (
            ("frustration", expect == "compact", analysis.frustration),
            ("clear", expect == "clear", got == "clear"),
        ):
            cell = counts[label]
            cell[0] += truth and pred
            cell[1] += pred and not truth
            cell[2] += truth and not pred
        if expect == "none":
            negatives += 1
            false_tips += got != "none"
        if verbose and got != expect:
            print(f"  miss {case['id']}: expected {expect}, got {got}: {messages[-1]!r}")
    for label, name in (("frustration", "frustration"), ("clear", "topic shift")):
        p, r, f = prf(*counts[label])
        print(
            f"{name:12} precision {p:.3f}  recall {r:.3f}  F1 {f:.3f}  (tp/fp/fn {counts[label]})"
        )
    rate = false_tips / negatives if negatives else 0.0
    print(
        f"false suggestions, last message of on-topic conversations: {false_tips}/{negatives}"
        f" = {rate:.1%}"
    )
    on_topic = [c["messages"] for c in cases if c["expect"] == "none"]
    judged = tips = 0
    for messages in on_topic:
        assert isinstance(messages, list)
        for end in range(1, len(messages) + 1):
            judged += 1
            tips += judge_conversation(messages[:end], Params(), WINDOW).suggestion is not None
    print(
        f"false suggestions, every message of on-topic conversations: {tips}/{judged}"
        f" = {tips / judged:.1%}"
    )


def one_pass(conversations: list[list[str]], timings: list[float] | None) -> None:
    params = Params()
    for messages in conversations:
        recent: list[list[str]] = []
        for text in messages:
            started = time.perf_counter_ns()
            recent = advance(recent, analyze(text, recent, params).keywords, WINDOW)
            if timings is not None:
                timings.append((time.perf_counter_ns() - started) / 1e6)


def speed(cases: list[dict[str, object]]) -> None:
    conversations = [list(c["messages"]) for c in cases]  # type: ignore[call-overload]
    one_pass(conversations, None)  # warm-up
    timings: list[float] = []
    started = time.perf_counter()
    for _ in range(ROUNDS):
        one_pass(conversations, timings)
    elapsed = time.perf_counter() - started
    timings.sort()
    tracemalloc.start()
    one_pass(conversations, None)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"latency per message: median {statistics.median(timings):.4f} ms, "
        f"p99 {timings[int(len(timings) * 0.99)]:.4f} ms over {len(timings)} messages; "
        f"throughput {len(timings) / elapsed:,.0f} messages/s; peak memory {peak / 1024:.0f} KiB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", type=Path, default=[DEFAULT_CASES])
    parser.add_argument("--verbose", action="store_true", help="list every misjudged case")
    args = parser.parse_args()
    for path in args.cases:
        cases = load(path)
        print(f"{len(cases)} cases from {path.name}")
        quality(cases, args.verbose)
        speed(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
