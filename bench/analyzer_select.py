"""The analyzer's threshold-selection rule, and leave-one-set-out checks of it.

The rule (written down before the thresholds were tuned for the third blind set: the one of
`tests/data/analyzer_blind/README.md`, extended by the cue bonus): on the development
conversations (all the labelled sets, the retired blind sets included),

1. complaint similarity (semantic mode): the value in 0.80-0.97 (steps of 0.01) with the best
   frustration F1 among those whose frustration precision is at least 0.97, rules and
   similarity together; ties go to the stricter (higher) value;
2. topic shift, semantic mode: the threshold in 0.70-0.90 and the cue bonus in 0.00-0.10 (steps
   of 0.01) plus 0.15, 0.20 and 0.30, jointly, with the best topic-shift F1 among those whose
   false-tip rate on the conversations labelled `none` is at most 3%; ties go to the stricter
   values (lower threshold, then lower bonus). No value under 3%: the fewest false tips;
3. lexical mode: the threshold in 0.00-0.60 the same way (its cue bonus stays 0.3).

`leave_one_out` applies the rule to every set but one and scores the one left out, for each
set in turn: a measure of how well the selection generalises (the rules themselves were written
after reading all of them, so it says nothing about the rules' own fit).

Every candidate value is judged from one pass over the cases: the structural reading, the
topic score and the complaint similarity do not depend on the thresholds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.analyzer.detect import Analysis, Mode, Params, Reading, read, similar_complaint

Tally = dict[str, list[int]]

COMPLAINT_GRID = [round(0.80 + i * 0.01, 2) for i in range(18)]
SEMANTIC_GRID = [round(0.70 + i * 0.01, 2) for i in range(21)]
LEXICAL_GRID = [round(i * 0.01, 2) for i in range(61)]
CUE_GRID = [round(i * 0.01, 2) for i in range(11)] + [0.15, 0.2, 0.3]
MAX_FALSE_TIPS = 0.03
MIN_COMPLAINT_PRECISION = 0.97


@dataclass(frozen=True, slots=True)
class Scored:
    """What a verdict is made of, for one conversation, whatever the thresholds."""

    expect: str
    reading: Reading
    complaint: float | None
    score: float | None
    semantic: bool


def prepare(
    cases: list[dict[str, Any]],
    analyses: Sequence[Analysis],
    complaints: Sequence[float | None],
) -> list[Scored]:
    return [
        Scored(c["expect"], read(c["messages"][-1]), s, a.score, a.mode is Mode.SEMANTIC)
        for c, a, s in zip(cases, analyses, complaints, strict=True)
    ]


def verdict(case: Scored, params: Params) -> str:
    r = case.reading
    if r.complains or similar_complaint(r, case.complaint, params):
        return "compact"
    if not r.candidate or case.score is None:
        return "none"
    if case.semantic:
        threshold = params.semantic_threshold + (params.cue_bonus if r.cue else 0.0)
    else:
        threshold = params.threshold + (params.lexical_cue_bonus if r.cue else 0.0)
    return "clear" if case.score < threshold else "none"


def tally(cases: Sequence[Scored], params: Params) -> Tally:
    t = {"frustration": [0, 0, 0], "clear": [0, 0, 0], "false_tips": [0, 0]}
    for case in cases:
        got = verdict(case, params)
        for label, truth, pred in (
            ("frustration", case.expect == "compact", got == "compact"),
            ("clear", case.expect == "clear", got == "clear"),
        ):
            t[label][0] += truth and pred
            t[label][1] += pred and not truth
            t[label][2] += truth and not pred
        if case.expect == "none":
            t["false_tips"][1] += 1
            t["false_tips"][0] += got != "none"
    return t


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def _best_shift(cases: Sequence[Scored], trials: list[Params]) -> Params:
    rows = []
    for trial in trials:
        t = tally(cases, trial)
        hits, n = t["false_tips"]
        rows.append((trial, prf(*t["clear"])[2], hits / n if n else 0.0))
    allowed = [r for r in rows if r[2] <= MAX_FALSE_TIPS]
    if allowed:  # the trials run from the strictest: max keeps the first of equals
        return max(allowed, key=lambda r: r[1])[0]
    return min(rows, key=lambda r: r[2])[0]


def select(cases: Sequence[Scored], base: Params, semantic: bool) -> Params:
    """The rule of the module docstring, applied to `cases` (judged in one mode)."""
    if not semantic:
        trials = [replace(base, threshold=v) for v in LEXICAL_GRID]
        return _best_shift(cases, trials)
    best: tuple[float, Params] | None = None
    for value in sorted(COMPLAINT_GRID, reverse=True):  # strictest first
        trial = replace(base, complaint_threshold=value)
        p, _, f1 = prf(*tally(cases, trial)["frustration"])
        if p >= MIN_COMPLAINT_PRECISION and (best is None or f1 > best[0]):
            best = (f1, trial)
    params = base if best is None else best[1]
    trials = [
        replace(params, semantic_threshold=t, cue_bonus=c) for t in SEMANTIC_GRID for c in CUE_GRID
    ]
    return _best_shift(cases, trials)


def leave_one_out(
    sets: dict[str, list[Scored]], base: Params, semantic: bool
) -> list[tuple[str, Params, Tally]]:
    """For each set: the rule applied to all the others, and the held-out set's tally."""
    out = []
    for name, held in sets.items():
        rest = [c for other, cases in sets.items() if other != name for c in cases]
        chosen = select(rest, base, semantic)
        out.append((name, chosen, tally(held, chosen)))
    return out
