"""Embedding a message only when the analyzer's verdict on it can depend on the embedding.

The model call is nearly all of the analyzer's cost, and most messages do not need it: one
that matched a frustration rule gets /compact whatever its topic; one that quotes someone and
cannot be a topic shift gets nothing whatever its vector (`detect.needs_vector`); and while
the session is cooling down (`watcher.cooling_down`) no tip is shown at all. The structural
rules are read first, then:

1. the message is embedded when the verdict may depend on it (the complaint similarity, or
   the learned frustration model, which weighs quotes and thanks itself);
2. the earlier messages' vectors are asked for (`earlier`) only when the message can be a
   topic shift (`detect.judges_shift`: a structural candidate, or any message for the learned
   models) and is not frustrated — the one verdict that compares with them. Deferred ones
   are embedded then, each only while the share admits it.

A message that was not embedded stays in the session's state as text (`state.py`) and is
embedded the first time a later message needs it, once: its vector then replaces the text.
Without an embedder, for an empty message, or when the model fails, the lexical rules judge
it exactly as before (`detect.analyze` without vectors). So does a message that needs its
vector while the share's bounds say no (`share.py`: the share of embedding time is spent,
the model's queue is full, or no core is spare): it is `shed`, judged by the rules alone
(frustration by rule; a topic shift only after an explicit cue at the default lexical
threshold, the fallback's precise side) and kept as text like a deferred one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from gateway.analyzer.detect import (
    Analysis,
    Params,
    Vector,
    analyze,
    frustrated,
    judges_shift,
    needs_vector,
    read,
    settled,
)
from gateway.analyzer.semantic import MAX_EMBED_CHARS, SemanticSide, pack
from gateway.analyzer.state import WatchState

# The recent messages' vectors (oldest first), computed on demand.
Earlier = Callable[[], Awaitable[Sequence[Vector]]]


@dataclass(frozen=True, slots=True)
class Judgement:
    analysis: Analysis
    vector: tuple[float, ...] | None = None  # the message's vector, when it was computed
    deferred: bool = False  # not embedded (nothing needed it, or shed): keep its text
    shed: bool = False  # needed its vector, but the share's bounds said no (`share.py`)


async def judge_lazily(
    side: SemanticSide,
    text: str,
    recent: Sequence[Sequence[str]],
    params: Params,
    earlier: Earlier,
    *,
    cooling: bool = False,
) -> Judgement:
    """Judge `text` against the recent messages' keywords (`recent`) and, only if needed,
    vectors (`earlier`). `cooling`: no tip can be shown now, so no verdict needs a vector."""
    reading = read(text)
    if side.embedder is None or not text.strip():
        return Judgement(analyze(text, recent, params, reading=reading))
    if cooling or not needs_vector(reading, params):
        return Judgement(settled(reading, frustration=reading.complains), deferred=True)
    if not side.admit():  # the share's bounds say no: the rules alone, the text kept
        return Judgement(analyze(text, recent, params, reading=reading), deferred=True, shed=True)
    vector = await side.embed(text)
    if vector is None:  # the model failed: the lexical rules, as without an embedder
        return Judgement(analyze(text, recent, params, reading=reading))
    complaint = side.complaint_similarity(vector)
    upset = frustrated(text, reading, params, vector=vector, complaint=complaint)
    if upset or not judges_shift(reading, params, vector):
        return Judgement(settled(reading, frustration=upset), vector)
    analysis = analyze(
        text,
        recent,
        params,
        vector=vector,
        recent_vectors=await earlier(),
        complaint=complaint,
        reading=reading,
        frustration=upset,
    )
    return Judgement(analysis, vector)


def pending_text(text: str) -> str:
    """What a deferred message keeps of its text: what would have been embedded."""
    return text[:MAX_EMBED_CHARS]


async def session_vectors(side: SemanticSide, state: WatchState) -> list[tuple[float, ...]]:
    """The session's recent vectors, embedding the messages deferred so far (each once: the
    vector replaces the text in `state`; one that fails to embed is dropped). Each is
    embedded only while the share's bounds admit it, the latest first: under load a message
    is not charged for the whole backlog its session shed, and with fewer than two vectors
    its topic is judged by the rules."""
    model = side.model
    if model is None:
        return []
    pending = state.pending_of(model)
    if pending:
        found: dict[str, tuple[str, tuple[float, ...]] | None] = {}
        for text in reversed(dict.fromkeys(pending)):
            if not side.admit():
                break
            vector = await side.embed(text)
            found[text] = None if vector is None else (pack(vector), vector)
        state.resolved(model, found)
    return state.vectors_of(model)
