"""Train the analyzer's learned models (`gateway/analyzer/learned.py`) on the development sets.

    python -m bench.analyzer_train            # train, choose the thresholds, write learned.json
    python -m bench.analyzer_train --loso     # the procedure on all sets but one, each in turn
    python -m bench.analyzer_train --dry-run  # train and report, write nothing
    python -m bench.analyzer_train --without-earlier  # the last messages only, as before
    python -m bench.analyzer_train --cache ~/.cache/iris-vectors.npz  # keep the vectors

Needs the `semantic` extra (the vectors) and numpy (which the extra brings). Deterministic: L2
regularised logistic regression fitted by Newton's method, no sampling.

The procedure, fixed before any blind set is scored:

0. The rows: the last message of every development conversation (labelled), and, once each,
   the messages before it that a live chat judges (past the session's first
   `MIN_SESSION_MESSAGES`): context written to lead up to the last message, labelled "none".
   Without them the models had never seen the commonest messages of a real chat — a report
   on what the user tried ("you said X, did that"), a short fact — and gave 8% of them a tip.
   They are training rows only: the thresholds below are chosen on the last messages.

1. frustration probe: a logistic model on the judged message's vector (label: `compact`);
   shift probe: the same with label `clear`. Regularisation `LAMBDA` on the weights.
2. Each development set gets probe logits from a probe trained on the other sets (out of
   fold), so the combination below sees the probe as it behaves on new data.
3. The combinations (`learned.frustration_features`, `learned.shift_features`): standardised
   features, a logistic model on all sets; the threshold on its logit by the rule:
   - frustration (`rules OR logit >= t`): the best F1 with precision at least `MIN_PRECISION`
     over out-of-fold logits (each set scored by a combination trained on the others);
   - shift (`logit >= t` on every message judged in semantic mode, frustration decided
     first; the structural rules are features, not a gate): the best F1 with at most
     `MAX_FALSE_TIPS` of the no-tip conversations given any tip, over out-of-fold logits.
4. The probes trained on all sets, the combinations and thresholds above, written to
   `gateway/analyzer/learned.json` with the embedding model's name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.analyzer_eval import DEV, WINDOW, Vec, embed_all, load, stored
from gateway.analyzer.detect import Mode, Params, judge_conversation, read
from gateway.analyzer.learned import (
    RECENT,
    WEIGHTS,
    Learned,
    Logistic,
    frustration_features,
    shift_features,
)
from gateway.analyzer.semantic import SemanticSide
from gateway.analyzer.watcher import MIN_SESSION_MESSAGES
from gateway.knowledge.local_embedder import open_local_embedder

# The features look at the analyzer's window of recent messages (`learned.RECENT`); the
# conversations are judged with the same one.
assert WINDOW == RECENT, "bench.analyzer_eval.WINDOW and learned.RECENT must agree"
LAMBDA = 1.0
MIN_PRECISION = 0.975
MAX_FALSE_TIPS = 0.025
THRESHOLD_GRID = 801  # quantiles of the out-of-fold logits tried as thresholds


@dataclass
class Row:
    group: str
    expect: str
    vector: np.ndarray
    frustration: list[float]  # features, the probe's logit (first) filled in later
    shift: list[float]
    complains: bool
    judged: bool  # enough earlier vectors for a topic verdict (semantic mode)
    earlier: bool = False  # a message before the last of its conversation (no tip: "none")


def fit(x: np.ndarray, y: np.ndarray, lam: float = LAMBDA) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (bias not regularised), Newton's method."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    penalty = lam * np.diag(np.r_[np.ones(x.shape[1]), 0.0])
    for _ in range(50):
        p = 1 / (1 + np.exp(-(xb @ w)))
        gradient = xb.T @ (p - y) + penalty @ w
        hessian = (xb * (p * (1 - p))[:, None]).T @ xb + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w[:-1], float(w[-1])


def logits(model: tuple[np.ndarray, float], x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x @ model[0] + model[1]
    return out


class Stack:
    """A standardised logistic model over feature rows."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.mean = x.mean(0)
        self.scale = x.std(0)
        self.scale[self.scale < 1e-9] = 1.0
        self.model = fit((x - self.mean) / self.scale, y)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return logits(self.model, (x - self.mean) / self.scale)

    def logistic(self, threshold: float) -> Logistic:
        return Logistic(
            weights=tuple(_round(self.model[0])),
            bias=_round1(self.model[1]),
            mean=tuple(_round(self.mean)),
            scale=tuple(_round(self.scale)),
            threshold=_round1(threshold),
        )


def _round1(value: float) -> float:
    return float(f"{value:.6g}")


def _round(values: np.ndarray) -> list[float]:
    return [_round1(v) for v in values]


def read_cache(cache: Path, model: str | None) -> dict[str, Vec]:
    """The vectors kept in `cache` for `model` (none for another model or no file). A NumPy
    archive read without pickle: texts, vectors and the model's name."""
    if not cache.exists():
        return {}
    with np.load(cache, allow_pickle=False) as saved:
        if str(saved["model"]) != model:
            return {}
        return {
            str(text): tuple(map(float, vector))
            for text, vector in zip(saved["texts"], saved["vectors"], strict=True)
        }


def write_cache(cache: Path, model: str | None, vectors: dict[str, Vec]) -> None:
    """Write the archive next to `cache`, then move it into place (never half written)."""
    partial = cache.with_name(cache.name + ".partial.npz")
    np.savez(
        partial,
        model=np.array(model or ""),
        texts=np.array(list(vectors)),
        vectors=np.array(list(vectors.values()), dtype=np.float64),
    )
    os.replace(partial, cache)


async def vectors_of(side: SemanticSide, texts: list[str], cache: Path | None) -> dict[str, Vec]:
    """Every text's vector; with `cache` (a NumPy archive), those kept there for this model
    are reused and the file updated."""
    kept: dict[str, Vec] = {}
    if cache is not None:
        await side.embed("warm-up")  # loads the model, so its name is known
        kept = await asyncio.to_thread(read_cache, cache, side.model)
    missing = [t for t in dict.fromkeys(texts) if t not in kept]
    if missing:
        kept |= await embed_all(side, missing)
        if cache is not None:
            await asyncio.to_thread(write_cache, cache, side.model, kept)
    return kept


async def rows_of(
    groups: dict[str, list[dict[str, Any]]], cache: Path | None = None
) -> tuple[list[Row], str]:
    embedder = open_local_embedder()
    if embedder is None:
        sys.exit("the `semantic` extra is not installed: nothing to train on")
    side = SemanticSide(embedder)
    texts = [m for cases in groups.values() for case in cases for m in case["messages"]]
    vectors = await vectors_of(side, texts, cache)
    params = Params()  # the similarity side only: the learned models are what we train
    rows = []
    seen: set[tuple[str, ...]] = set()

    def row(group: str, messages: list[str], expect: str, earlier: bool) -> Row:
        # Earlier vectors as a live session keeps them: int8 in its stored state.
        vs = [*(stored(vectors[m]) for m in messages[:-1]), vectors[messages[-1]]]
        text, vector, recent = messages[-1], vs[-1], vs[:-1][-WINDOW:]
        complaint = side.complaint_similarity(vector)
        analysis = judge_conversation(messages, params, WINDOW, vectors=vs, complaint=complaint)
        signals = read(text).signals
        return Row(
            group=group,
            expect=expect,
            vector=np.array(vector),
            frustration=frustration_features(text, signals, 0.0, complaint),
            shift=shift_features(text, signals, 0.0, vector, recent, analysis.score),
            complains=signals.complains,
            judged=analysis.mode is Mode.SEMANTIC,
            earlier=earlier,
        )

    for group, cases in groups.items():
        for case in cases:
            messages = case["messages"]
            rows.append(row(group, messages, case["expect"], False))
            # The messages before the last that a live chat judges (past the session's first
            # ones): context written to lead up to the last, so no tip is right for them. Each
            # once (conversations of a subject share their openings).
            for end in range(MIN_SESSION_MESSAGES + 1, len(messages)):
                prefix = tuple(messages[:end])
                if prefix not in seen:
                    seen.add(prefix)
                    rows.append(row(group, list(prefix), "none", True))
    assert side.model is not None
    return rows, side.model


class Data:
    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.groups = np.array([r.group for r in rows])
        self.names = list(dict.fromkeys(r.group for r in rows))
        self.x = np.stack([r.vector for r in rows])
        self.compact = np.array([r.expect == "compact" for r in rows])
        self.clear = np.array([r.expect == "clear" for r in rows])
        self.none = np.array([r.expect == "none" for r in rows])
        self.complains = np.array([r.complains for r in rows])
        self.judged = np.array([r.judged for r in rows])
        self.earlier = np.array([r.earlier for r in rows])
        self.last = ~self.earlier

    def features(self, kind: str, probe: np.ndarray) -> np.ndarray:
        table = np.array([getattr(r, kind) for r in self.rows], dtype=float)
        table[:, 0] = probe
        return table


def out_of_fold(
    d: Data, within: np.ndarray, predict: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """Scores for the rows in `within`, each set's from `predict(train, target)` trained on
    the other sets' rows (boolean masks)."""
    out = np.zeros(len(d.rows))
    for name in d.names:
        target = within & (d.groups == name)
        if target.any():
            out[target] = predict(within & (d.groups != name), target)
    return out


def out_of_fold_probe(d: Data, label: np.ndarray, within: np.ndarray) -> np.ndarray:
    """Probe logits for the rows in `within`, each set's from a probe trained on the others."""
    return out_of_fold(
        d, within, lambda train, target: logits(fit(d.x[train], label[train]), d.x[target])
    )


def out_of_fold_stack(x: np.ndarray, label: np.ndarray, d: Data, within: np.ndarray) -> np.ndarray:
    return out_of_fold(d, within, lambda train, target: Stack(x[train], label[train])(x[target]))


def prf(truth: np.ndarray, predicted: np.ndarray) -> tuple[int, int, int, float]:
    tp = int((truth & predicted).sum())
    fp = int((~truth & predicted).sum())
    fn = int((truth & ~predicted).sum())
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return tp, fp, fn, f1


def choose_frustration(scores: np.ndarray, d: Data, within: np.ndarray) -> float:
    best: tuple[float, float] | None = None
    for t in np.quantile(scores[within], np.linspace(0, 1, THRESHOLD_GRID)):
        predicted = (d.complains | (scores >= t))[within]
        tp, fp, _, f1 = prf(d.compact[within], predicted)
        if tp and tp / (tp + fp) >= MIN_PRECISION and (best is None or f1 > best[0]):
            best = (f1, float(t))
    return best[1] if best is not None else float(scores[within].max() + 1.0)


def choose_shift(
    scores: np.ndarray, frustrated: np.ndarray, d: Data, shifting: np.ndarray, within: np.ndarray
) -> float:
    """The shift threshold on the `shifting` rows' scores, judged on all rows `within`."""
    best: tuple[float, float] | None = None
    none = d.none & within
    for t in np.quantile(scores[shifting], np.linspace(0, 1, THRESHOLD_GRID)):
        clear = d.judged & (scores >= t) & ~frustrated
        false_tips = ((clear | frustrated) & none).sum() / max(1, none.sum())
        _, _, _, f1 = prf(d.clear[within], clear[within])
        if false_tips <= MAX_FALSE_TIPS and (best is None or f1 > best[0]):
            best = (f1, float(t))
    return best[1] if best is not None else float(scores[shifting].max() + 1.0)


@dataclass
class Trained:
    frustration_probe: tuple[np.ndarray, float]
    shift_probe: tuple[np.ndarray, float]
    frustration: Stack
    shift: Stack
    frustration_threshold: float
    shift_threshold: float

    def learned(self, model: str) -> Learned:
        def probe(m: tuple[np.ndarray, float]) -> Logistic:
            return Logistic(weights=tuple(_round(m[0])), bias=_round1(m[1]))

        return Learned(
            model=model,
            window=WINDOW,
            frustration_probe=probe(self.frustration_probe),
            frustration=self.frustration.logistic(self.frustration_threshold),
            shift_probe=probe(self.shift_probe),
            shift=self.shift.logistic(self.shift_threshold),
        )


def train(d: Data, within: np.ndarray) -> Trained:
    """The whole procedure on the rows in `within`. The shift models learn from the messages
    judged in semantic mode that no rule calls frustrated (live, those the frustration model
    calls frustrated are not put to the shift model either; the verdicts are the same, since
    frustration comes first)."""
    fx = d.features("frustration", out_of_fold_probe(d, d.compact, within))
    f_scores = out_of_fold_stack(fx, d.compact, d, within)
    # The thresholds are chosen on the conversations' last messages, as before; the earlier
    # messages are in the models' training only.
    f_threshold = choose_frustration(f_scores, d, within & d.last)
    frustrated = d.complains | (f_scores >= f_threshold)
    shifting = within & d.judged & ~d.complains
    sx = d.features("shift", out_of_fold_probe(d, d.clear, shifting))
    s_scores = np.full(len(d.rows), -np.inf)
    s_scores[shifting] = out_of_fold_stack(sx, d.clear, d, shifting)[shifting]
    s_threshold = choose_shift(s_scores, frustrated, d, shifting & d.last, within & d.last)
    return Trained(
        frustration_probe=fit(d.x[within], d.compact[within]),
        shift_probe=fit(d.x[shifting], d.clear[shifting]),
        frustration=Stack(fx[within], d.compact[within]),
        shift=Stack(sx[shifting], d.clear[shifting]),
        frustration_threshold=f_threshold,
        shift_threshold=s_threshold,
    )


def apply(t: Trained, d: Data, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frustration and shift verdicts of the trained models on `rows`."""
    fx = d.features("frustration", logits(t.frustration_probe, d.x))
    sx = d.features("shift", logits(t.shift_probe, d.x))
    frustrated = d.complains | (t.frustration(fx) >= t.frustration_threshold)
    clear = d.judged & (t.shift(sx) >= t.shift_threshold) & ~frustrated
    return frustrated & rows, clear & rows


def report(name: str, d: Data, rows: np.ndarray, frustrated: np.ndarray, clear: np.ndarray) -> None:
    """The last messages' figures, then the tips on the earlier messages."""
    earlier, rows = rows & d.earlier, rows & d.last
    ftp, ffp, ffn, ff1 = prf(d.compact[rows], frustrated[rows])
    stp, sfp, sfn, sf1 = prf(d.clear[rows], clear[rows])
    none = d.none & rows
    tips = int(((frustrated | clear) & none).sum())
    f_early, s_early = int((frustrated & earlier).sum()), int((clear & earlier).sum())
    print(
        f"  {name:18} frustration P {ftp}/{ftp + ffp} R {ftp}/{ftp + ffn} F1 {ff1:.2f} | "
        f"shift P {stp}/{stp + sfp} R {stp}/{stp + sfn} F1 {sf1:.2f} | "
        f"false tips {tips}/{int(none.sum())} = {tips / max(1, none.sum()):.3f} | "
        f"earlier: compact {f_early}, clear {s_early} of {int(earlier.sum())}"
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loso", action="store_true", help="leave each set out in turn")
    parser.add_argument("--dry-run", action="store_true", help="write nothing")
    parser.add_argument(
        "--without-earlier",
        action="store_true",
        help="train on the last messages only (the earlier ones are still reported)",
    )
    parser.add_argument(
        "--cache", type=Path, help="keep the texts' vectors in this file between runs"
    )
    args = parser.parse_args()
    groups = {(p.parent.name if p.name == "cases.jsonl" else p.stem): load(p) for p in DEV}
    rows, model = await rows_of(groups, args.cache)
    d = Data(rows)
    everything = d.last.copy() if args.without_earlier else np.ones(len(rows), dtype=bool)
    print(
        f"{int(d.last.sum())} conversations from {len(groups)} development sets and"
        f" {int(d.earlier.sum())} of their earlier messages; model {model}"
    )
    if args.loso:
        pooled_f = np.zeros(len(rows), dtype=bool)
        pooled_s = np.zeros(len(rows), dtype=bool)
        for name in d.names:
            held = d.groups == name
            trained = train(d, everything & ~held)
            frustrated, clear = apply(trained, d, held)
            report(f"held out {name}", d, held, frustrated, clear)
            pooled_f |= frustrated
            pooled_s |= clear
        report("pooled", d, np.ones(len(rows), dtype=bool), pooled_f, pooled_s)
        return 0
    trained = train(d, everything)
    every_row = np.ones(len(rows), dtype=bool)
    report("all (in sample)", d, every_row, *apply(trained, d, every_row))
    print(
        f"  thresholds: frustration {trained.frustration_threshold:.3f},"
        f" shift {trained.shift_threshold:.3f}"
    )
    if not args.dry_run:
        learned = trained.learned(model)
        WEIGHTS.write_text(json.dumps(learned.to_json(), separators=(",", ":")) + "\n")
        print(f"  written: {WEIGHTS} ({WEIGHTS.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
