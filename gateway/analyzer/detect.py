"""Pure detection of frustration and topic shifts in a user message. No I/O, no state.

Runs on every chat message before the agent turn. Two modes, chosen per message by what the
caller can give:

- Semantic (the message's vector and the recent messages' vectors are known): the topic score
  is the message's similarity to the recent user messages (`semantic.topic_similarity`) plus
  a small share of its keyword overlap (`lexical_weight`), minus a share of how much more
  alike the recent messages are among themselves than usual (`cohesion_weight`); below
  `semantic_threshold` it is a candidate shift.
- Lexical (no vectors: the extra is missing or the model failed): the share of the message's
  keywords the session used recently (`keywords.overlap`); below `Params.threshold`.

Either way the structural rules of `structure.py` carry the precision: a candidate becomes a
shift only when the message has a content word, asks for something, does not point back and
quotes nobody; an explicit cue ("by the way") that opens a sentence decides on its own: when
it announces a request or stands alone ("btw, how do I …", "Change of subject.") the message
is a candidate whatever follows, and the threshold is raised a little (`cue_bonus`;
`lexical_cue_bonus` in lexical mode); when it introduces a detail ("btw, the wall is
plasterboard. Does that matter?") it is none. With the learned models (`learned.py`) the rules
are the shift model's features instead of a gate: every message with enough earlier vectors is
judged (`judges_shift`). Nothing is judged before the session has
`MIN_RECENT_MESSAGES` earlier messages. The thresholds and the cue bonus are chosen by the
rule in `bench/analyzer_select.py`.

Frustration: the phrase rules of `frustration.py` on the user's own words (quotes, code and
reported speech blanked, `quoting.py`), or — in semantic mode — a message close to one of the
generic complaints (`Params.complaint_threshold`) that quotes nobody, does not open by thanking
or agreeing or with a cue, is no follow-up question ("hm. and if that doesn't help?") and
whose reset words are not about a piece of the work (`similar_complaint`).

`margin` is the topic score minus its threshold (with the learned models: the shift logit's
distance below its threshold, over `learned.LOGIT_SCALE`); negative is a shift. The
confirmation model is asked only when it is small (`near`), on either side.

The structural side alone (`read`) tells whether the verdict can depend on the message's
embedding at all (`needs_vector`): the caller embeds only then (`lazy.py`), and a message that
is frustrated by rule or cannot be a shift is `settled` without a topic score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from gateway.analyzer.frustration import acknowledges, complains, follows_up, resets_work
from gateway.analyzer.keywords import keywords, overlap, recent_stems
from gateway.analyzer.learned import Learned, Signals
from gateway.analyzer.quoting import strip_quoted
from gateway.analyzer.semantic import MAX_EMBED_CHARS, cohesion, topic_similarity
from gateway.analyzer.structure import asks, cued_request, has_cue, points_back

Suggestion = Literal["clear", "compact"]
Vector = Sequence[float]

# The topic is judged once the session has this many earlier messages: the first messages of
# a conversation add detail rather than settle a subject.
MIN_RECENT_MESSAGES = 2


class Mode(StrEnum):
    SEMANTIC = "semantic"
    LEXICAL = "lexical"


@dataclass(frozen=True, slots=True, kw_only=True)
class Params:
    # Lexical mode: keyword overlap below this is a candidate shift.
    threshold: float = 0.0
    # Lexical mode: the session needs this many recent keywords before its topic is judged.
    min_keywords: int = 5
    # Semantic mode: similarity to the recent messages below this is a candidate shift.
    semantic_threshold: float = 0.84
    # Semantic mode: the keyword overlap, times this, is added to the similarity.
    lexical_weight: float = 0.03
    # Semantic mode: the recent messages' mutual similarity (`semantic.cohesion`) above
    # `cohesion_centre`, times this, is taken off the similarity: in a session whose messages
    # are all alike (one language, one style) a new subject still scores high.
    cohesion_weight: float = 0.25
    cohesion_centre: float = 0.85
    # An explicit cue ("by the way") raises the semantic threshold by this much (the cued
    # follow-ups that are no shift score well above the cued shifts) ...
    cue_bonus: float = 0.06
    # ... and the lexical one by this much.
    lexical_cue_bonus: float = 0.3
    # Semantic mode: cosine to a generic complaint from which a message counts as frustrated.
    complaint_threshold: float = 0.88
    # How close to the threshold, on either side, the confirmation model is asked.
    confirm_band: float = 0.05
    # Semantic mode: the learned models (`learned.py`) decide instead of the similarity
    # thresholds above, when they were trained on the embedder's model.
    learned: Learned | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    frustration: bool
    topic_shift: bool
    keywords: tuple[str, ...]
    mode: Mode = Mode.LEXICAL
    score: float | None = None  # None when the topic was not judged
    margin: float | None = None  # distance to the threshold, negative for a shift (see above)
    judged: bool = False  # a shift was judged here: a structural candidate, or any message
    # the learned shift model decided

    @property
    def suggestion(self) -> Suggestion | None:
        if self.frustration:
            return "compact"
        return "clear" if self.topic_shift else None

    def near(self, params: Params) -> bool:
        """Close enough to the threshold (either side) for the confirmation model to decide."""
        return (
            self.judged
            and not self.frustration
            and self.margin is not None
            and abs(self.margin) <= params.confirm_band
        )


def is_frustrated(text: str) -> bool:
    """Does the message complain about the conversation itself (not ask for a task)?"""
    return complains(strip_quoted(text))


@dataclass(frozen=True, slots=True)
class Reading:
    """What the structural rules make of a message on their own (no vectors)."""

    words: tuple[str, ...]  # its keywords (quotes, code and reported speech blanked)
    quotes: bool  # it quotes or reports someone
    complains: bool  # a frustration rule matched the user's own words
    thanks: bool  # it opens by thanking, agreeing or acknowledging
    work_reset: bool  # reset words about a piece of the work ("start over the migration")
    follow_up: bool  # a question building on the answer ("hm. and if that doesn't help?")
    cue: bool  # an explicit cue ("by the way")
    candidate: bool  # the structural rules allow a topic shift here
    own: str = ""  # the user's own words (quotes, code and reported speech blanked)

    @property
    def signals(self) -> Signals:
        return Signals(
            words=len(self.words),
            complains=self.complains,
            quotes=self.quotes,
            thanks=self.thanks,
            work_reset=self.work_reset,
            follow_up=self.follow_up,
            cue=self.cue,
            candidate=self.candidate,
            own=self.own[:MAX_EMBED_CHARS],
        )


def read(text: str) -> Reading:
    own = strip_quoted(text)
    words = keywords(own)
    quotes = own != text
    cue = has_cue(own)
    # A cue decides on its own: it announces a request (a candidate whatever follows) or a
    # detail about the current subject (none, whatever is asked after it).
    candidate = bool(words) and (
        cued_request(own) if cue else asks(own) and not quotes and not points_back(own)
    )
    return Reading(
        words,
        quotes,
        complains(own),
        acknowledges(own),
        resets_work(own),
        follows_up(own),
        cue,
        candidate,
        own,
    )


def _heard_out(reading: Reading) -> bool:
    """Is the message's similarity to the generic complaints beside the point? When it quotes
    someone, opens by thanking or agreeing, uses reset words about the work, asks a follow-up
    ("and if that doesn't help?") or opens with a cue ("by the way, …": an aside or a new
    subject, not a complaint)."""
    r = reading
    return r.quotes or r.thanks or r.work_reset or r.follow_up or r.cue


def similar_complaint(reading: Reading, complaint: float | None, params: Params) -> bool:
    """Is the message frustrated by its similarity to the generic complaints? Only in the
    user's own voice and when nothing else it does explains the likeness (`_heard_out`)."""
    return (
        complaint is not None
        and not _heard_out(reading)
        and complaint >= params.complaint_threshold
    )


def frustrated(
    text: str,
    reading: Reading,
    params: Params,
    *,
    vector: Vector | None = None,
    complaint: float | None = None,
) -> bool:
    """Is the message frustrated: by rule, or by the learned model or the complaint
    similarity when its vector is known?"""
    learned = _learned(params, vector)
    if learned is not None and vector is not None:
        return learned.frustrated(text, reading.signals, vector, complaint)
    return reading.complains or similar_complaint(reading, complaint, params)


def _learned(params: Params, vector: Vector | None) -> Learned | None:
    """The learned models, when they are set and made for vectors like this one."""
    learned = params.learned
    if learned is None or vector is None or len(vector) != learned.dim:
        return None
    return learned


def needs_vector(reading: Reading, params: Params) -> bool:
    """Can the verdict on this message depend on its embedding? Not when a frustration rule
    already matched (the tip is /compact whatever the topic), nor — without the learned
    models, which weigh quotes and thanks themselves — when it cannot be a shift and its
    similarity to the complaints would not count (`_heard_out`)."""
    if reading.complains:
        return False
    return judges_shift(reading, params) or not _heard_out(reading)


def judges_shift(reading: Reading, params: Params, vector: Vector | None = None) -> bool:
    """Can this message be a topic shift? With the learned models any message can (the
    structural rules are among their features; for a vector they fit, when it is known);
    otherwise only a structural candidate."""
    if reading.candidate or params.learned is None:
        return reading.candidate
    return vector is None or _learned(params, vector) is not None


def settled(reading: Reading, *, frustration: bool) -> Analysis:
    """The analysis of a message whose topic was not judged because no verdict depends on it
    (it is frustrated, or it cannot be a shift): semantic mode, no score."""
    return Analysis(
        frustration=frustration, topic_shift=False, keywords=reading.words, mode=Mode.SEMANTIC
    )


def analyze(
    text: str,
    recent: Sequence[Sequence[str]],
    params: Params = Params(),
    *,
    vector: Vector | None = None,
    recent_vectors: Sequence[Vector] = (),
    complaint: float | None = None,
    reading: Reading | None = None,
    frustration: bool | None = None,
) -> Analysis:
    """Judge `text` against the session's recent user messages (oldest first).

    `recent` holds their keywords; `vector`/`recent_vectors` the embeddings when known;
    `complaint` the message's similarity to the generic complaints; `reading` what `read`
    made of `text`, and `frustration` the verdict of `frustrated` on it with the same vector
    and complaint, when the caller has them already.
    """
    r = reading or read(text)
    words, candidate, cue = r.words, r.candidate, r.cue
    if frustration is None:
        frustration = frustrated(text, r, params, vector=vector, complaint=complaint)
    similarity = (
        topic_similarity(vector, recent_vectors)
        if vector is not None and len(recent_vectors) >= MIN_RECENT_MESSAGES
        else None
    )
    stems = recent_stems(recent)
    if similarity is not None:
        shared = overlap(words, stems) if words and stems else 0.0
        alike = cohesion(recent_vectors)
        baseline = 0.0 if alike is None else alike - params.cohesion_centre
        score = similarity + params.lexical_weight * shared - params.cohesion_weight * baseline
        learned = _learned(params, vector)
        if learned is not None:
            assert vector is not None
            margin = learned.shift_margin(text, r.signals, vector, recent_vectors, score)
            return Analysis(
                frustration=frustration,
                # the model's logit reached its threshold; frustration comes first
                topic_shift=not frustration and margin <= 0,
                keywords=words,
                mode=Mode.SEMANTIC,
                score=score,
                margin=margin,
                judged=True,
            )
        mode, threshold = Mode.SEMANTIC, params.semantic_threshold
    else:
        if len(recent) < MIN_RECENT_MESSAGES or len(stems) < params.min_keywords or not words:
            return Analysis(frustration=frustration, topic_shift=False, keywords=words)
        mode, score, threshold = Mode.LEXICAL, overlap(words, stems), params.threshold
    if cue:
        threshold += params.cue_bonus if mode is Mode.SEMANTIC else params.lexical_cue_bonus
    margin = score - threshold
    return Analysis(
        frustration=frustration,
        topic_shift=candidate and margin < 0,
        keywords=words,
        mode=mode,
        score=score,
        margin=margin,
        judged=candidate,
    )


def advance(recent: Sequence[Sequence[str]], words: Sequence[str], window: int) -> list[list[str]]:
    """The recent-keywords window after a message: the last `window` messages' keywords.

    A topic shift does not empty the window: the old topic fades out within `window`
    messages, and the new topic's messages meet their own keywords meanwhile.
    """
    kept = [list(m) for m in recent[-(window - 1) :]] if window > 1 else []
    if words:
        kept.append(list(words))
    return kept


def replay(messages: Sequence[str], window: int) -> list[list[str]]:
    """The recent-keywords window after these messages (oldest first)."""
    recent: list[list[str]] = []
    for text in messages:
        recent = advance(recent, keywords(strip_quoted(text)), window)
    return recent


def judge_conversation(
    messages: Sequence[str],
    params: Params = Params(),
    window: int = 4,
    *,
    vectors: Sequence[Vector | None] | None = None,
    complaint: float | None = None,
) -> Analysis:
    """Judge the last message, replaying the earlier ones as the session's history.

    `vectors`, when given, holds one embedding (or None) per message, aligned to the end (a
    shorter list covers the last messages); `complaint` is the last message's similarity to
    the generic complaints.
    """
    if not messages:
        raise ValueError("a conversation needs at least one message")
    recent = replay(messages[:-1], window)
    if vectors is None or vectors[-1] is None:
        return analyze(messages[-1], recent, params)
    earlier = [v for v in vectors[:-1][-window:] if v is not None]
    return analyze(
        messages[-1],
        recent,
        params,
        vector=vectors[-1],
        recent_vectors=earlier,
        complaint=complaint,
    )
