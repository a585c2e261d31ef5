"""The learned side of the semantic analyzer: two small logistic models over the message's
embedding and what the structural rules read, trained offline on the development sets.

Why: over five blind sets, rule and threshold additions fitted their development data and did
not carry to the next set; a message's embedding separates complaints and new subjects better
than any hand-written phrase list, and a model fitted to the rules' signals weighs them by what
they are worth on data they were not written for. Each decision is two steps:

1. a linear probe on the message's vector (384 weights and a bias): how much it reads like a
   complaint about the conversation (`frustration`) or like a question on its own (`shift`);
2. a logistic combination of that probe's logit with the signals of the rule side — the
   frustration rules, quotes, thanks, work resets, follow-ups, cues, the complaint similarity,
   the topic score and the similarities behind it, and a few surface figures (length, capitals,
   a question mark, addressing "you", an eye-roll emoji), and for frustration what the message
   says of the user's earlier words (`corrections.py`: "I told you …", a count of times)
   and of the replies (`replies.py`: asking for a shorter one, pointing out a contradiction)
   — standardised with the training data's means and deviations.

A message is frustrated when the frustration rules match or the combination's logit reaches
its threshold; it is a topic shift when it is not frustrated and the shift combination's logit
reaches its threshold. The structural rules do not gate the shift model: they are among its
features, each on its own (`structure.shape`: it asks, points back and how, a cue announcing a
request) beside their all-or-nothing verdict (`Reading.candidate`). As a gate they turned away
a quarter of the development sets' real shifts and two fifths of the later sets' (question
words missing in a language, "quick q what's …", a "them" that points nowhere); weighed by the
model, the pooled shift F1 of six development sets each left out in turn rose from 0.73 to
0.92 at about the same false tips (3.4% against 2.9%). Both thresholds were chosen by the
fixed rule of `bench/analyzer_train.py` (frustration: best F1 with precision at least 0.975;
shift: best F1 with at most 2.5% false tips), on scores each development set got from a model
trained without it.

The weights (`learned.json`) belong to one embedding model: with another one (or without the
file) the analyzer keeps its similarity thresholds (`detect.Params`). Retrain with
`python -m bench.analyzer_train` after changing a feature, a rule or the model.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import mul
from pathlib import Path
from typing import Any

from gateway.analyzer.corrections import corrections
from gateway.analyzer.replies import replies
from gateway.analyzer.semantic import cohesion, cosine, unit
from gateway.analyzer.structure import shape

log = logging.getLogger(__name__)

WEIGHTS = Path(__file__).with_name("learned.json")
# The learned margin is the logit's distance to its threshold divided by this, so that the
# confirmation band (`[analyzer] confirm_band`, 0.05 by default) spans about ±1 in logits.
LOGIT_SCALE = 20.0

# You-like pronouns in the covered languages (a message addressing the assistant; some also
# match other words, e.g. French "je"), and the eye-roll and anger emoji of a sarcastic or
# angry message. Generic signals, weighed by the model.
_YOU = re.compile(
    r"\b(you|your|u|ur|youre|you're|du|dich|dir|dein|deine|tu|te|toi|vous|t'|tú|ti|usted|"
    r"você|voce|vc|jij|je|jou|jouw|ty|cię|ci|tobie|twoj\w*|twoja)\b",
    re.IGNORECASE,
)
_ANGRY = re.compile("[🙄😡🤦😤🙃👏😒]")
_CAPITAL_WORD = re.compile(r"\b[A-ZÄÖÜÉÈ]{2,}\b")
# Recent vectors the shift features look at (the analyzer's window).
RECENT = 4


def surface(text: str, words: int) -> list[float]:
    """Length, capitals, punctuation, addressing "you", eye-roll emoji."""
    letters = [c for c in text if c.isalpha()]
    capitals = sum(c.isupper() for c in letters) / max(1, len(letters))
    return [
        float(bool(_YOU.search(text))),
        capitals,
        float(min(len(_CAPITAL_WORD.findall(text)), 5)),
        float("?" in text),
        float("!" in text),
        float(bool(_ANGRY.search(text))),
        math.log1p(len(text)),
        min(words, 20) / 20,
    ]


@dataclass(frozen=True, slots=True)
class Signals:
    """What the rule side read in a message (`detect.Reading`), as the models see it."""

    words: int
    complains: bool
    quotes: bool
    thanks: bool
    work_reset: bool
    follow_up: bool
    cue: bool
    candidate: bool
    # the user's own words, in the part of the message that is embedded: the features that
    # read phrases look no further than the model does (and stay fast on a long message)
    own: str = ""

    @property
    def heard_out(self) -> bool:
        return self.quotes or self.thanks or self.work_reset or self.follow_up or self.cue


def frustration_features(
    text: str, s: Signals, probe: float, complaint: float | None
) -> list[float]:
    return [
        probe,
        0.0 if complaint is None else complaint,
        float(s.complains),
        float(s.quotes),
        float(s.thanks),
        float(s.work_reset),
        float(s.follow_up),
        float(s.cue),
        float(s.heard_out),
        *surface(text, s.words),
        *map(float, corrections(s.own)),
        *map(float, replies(s.own)),
    ]


def similarities(vector: Sequence[float], recent: Sequence[Sequence[float]]) -> list[float]:
    """Cosines of the message to the recent messages' mean direction, the nearest, the last and
    the farthest of them, and the recent messages' mean mutual cosine."""
    usable = [r for r in recent[-RECENT:] if len(r) == len(vector)]
    if not usable:
        return [0.0, 0.0, 0.0, 0.9, 0.0]
    centre = unit([sum(column) for column in zip(*usable, strict=True)]) or usable[-1]
    cosines = [cosine(vector, r) for r in usable]
    alike = cohesion(usable)
    return [
        cosine(vector, centre),
        max(cosines),
        cosines[-1],
        0.9 if alike is None else alike,
        min(cosines),
    ]


def shift_features(
    text: str,
    s: Signals,
    probe: float,
    vector: Sequence[float],
    recent: Sequence[Sequence[float]],
    score: float | None,
) -> list[float]:
    return [
        probe,
        1.0 if score is None else score,
        *similarities(vector, recent),
        float(s.cue),
        float(s.candidate),
        float(s.quotes),
        float(s.thanks),
        float(s.follow_up),
        math.log1p(len(text)),
        min(s.words, 20) / 20,
        float("?" in text),
        float(min(len(recent), RECENT)),
        *map(float, shape(s.own, s.cue)),
    ]


@dataclass(frozen=True, slots=True)
class Logistic:
    """A logistic model: standardise (mean, deviation), weights and bias; a threshold on the
    logit."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    threshold: float = 0.0

    def logit(self, features: Sequence[float]) -> float:
        if len(features) != len(self.weights):
            raise ValueError(f"{len(features)} features for {len(self.weights)} weights")
        if self.mean:
            features = [
                (f - m) / d for f, m, d in zip(features, self.mean, self.scale, strict=True)
            ]
        total: float = sum(map(mul, features, self.weights))
        return total + self.bias

    @classmethod
    def of(cls, data: dict[str, Any], size: int) -> Logistic:
        """From its JSON form; ValueError unless it has `size` weights (and as many means and
        nonzero scales, if any) and every number is finite."""
        found = cls(
            weights=tuple(map(float, data["weights"])),
            bias=float(data["bias"]),
            mean=tuple(map(float, data.get("mean", ()))),
            scale=tuple(map(float, data.get("scale", ()))),
            threshold=float(data.get("threshold", 0.0)),
        )
        numbers = (*found.weights, found.bias, *found.mean, *found.scale, found.threshold)
        if len(found.weights) != size:
            raise ValueError(f"{len(found.weights)} weights where {size} features are read")
        if len(found.mean) != len(found.scale) or (found.mean and len(found.mean) != size):
            raise ValueError("means and scales do not match the weights")
        if not all(map(math.isfinite, numbers)) or 0.0 in found.scale:
            raise ValueError("a weight, mean or scale is not a finite number (or a scale is 0)")
        return found

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weights": list(self.weights), "bias": self.bias}
        if self.mean:
            out |= {"mean": list(self.mean), "scale": list(self.scale)}
        return out | {"threshold": self.threshold}


@dataclass(frozen=True, slots=True)
class Learned:
    """The two decisions' models, for vectors of `model` (`dim` numbers) and a window of
    `window` recent messages (`[analyzer] recent_messages`)."""

    model: str
    frustration_probe: Logistic
    frustration: Logistic
    shift_probe: Logistic
    shift: Logistic
    window: int = RECENT

    @property
    def dim(self) -> int:
        return len(self.frustration_probe.weights)

    def frustration_logit(
        self, text: str, s: Signals, vector: Sequence[float], complaint: float | None
    ) -> float:
        probe = self.frustration_probe.logit(vector)
        return self.frustration.logit(frustration_features(text, s, probe, complaint))

    def frustrated(
        self, text: str, s: Signals, vector: Sequence[float], complaint: float | None
    ) -> bool:
        if s.complains:
            return True
        return self.frustration_logit(text, s, vector, complaint) >= self.frustration.threshold

    def shift_margin(
        self,
        text: str,
        s: Signals,
        vector: Sequence[float],
        recent: Sequence[Sequence[float]],
        score: float | None,
    ) -> float:
        """The shift logit's distance below its threshold, over `LOGIT_SCALE` (<= 0: a shift;
        the sign of `detect.Analysis.margin`)."""
        probe = self.shift_probe.logit(vector)
        logit = self.shift.logit(shift_features(text, s, probe, vector, recent, score))
        return (self.shift.threshold - logit) / LOGIT_SCALE

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "window": self.window,
            "frustration_probe": self.frustration_probe.to_json(),
            "frustration": self.frustration.to_json(),
            "shift_probe": self.shift_probe.to_json(),
            "shift": self.shift.to_json(),
        }

    @classmethod
    def of(cls, data: dict[str, Any]) -> Learned:
        """From its JSON form; ValueError when a model's size does not fit the features read
        now (a feature changed without retraining) or the two probes' sizes differ."""
        probe = Logistic.of(data["frustration_probe"], len(data["frustration_probe"]["weights"]))
        found = cls(
            model=str(data["model"]),
            frustration_probe=probe,
            frustration=Logistic.of(data["frustration"], FRUSTRATION_FEATURES),
            shift_probe=Logistic.of(data["shift_probe"], len(probe.weights)),
            shift=Logistic.of(data["shift"], SHIFT_FEATURES),
            window=int(data.get("window", RECENT)),
        )
        if found.window < 1:
            raise ValueError("window must be at least 1")
        return found


# How many features each combination reads (the shipped weights must have as many).
_NOTHING = Signals(0, False, False, False, False, False, False, False)
FRUSTRATION_FEATURES = len(frustration_features("", _NOTHING, 0.0, None))
SHIFT_FEATURES = len(shift_features("", _NOTHING, 0.0, [], [], None))

_LOADED: dict[Path, Learned | None] = {}


def load(model: str | None, path: Path = WEIGHTS) -> Learned | None:
    """The learned models for vectors of `model` (the embedder's full name: engine release and
    model, as the session state keys its vectors), or None: no model, no file, another model,
    or a file that cannot be read or does not fit the features (logged once)."""
    if model is None:
        return None
    if path not in _LOADED:
        try:
            _LOADED[path] = Learned.of(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            _LOADED[path] = None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "analyzer weights %s unusable (%s); using the similarity thresholds",
                path,
                exc.__class__.__name__,
            )
            _LOADED[path] = None
    learned = _LOADED[path]
    if learned is None or learned.model != model:
        return None
    return learned
