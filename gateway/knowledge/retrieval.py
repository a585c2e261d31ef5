"""Which documents are relevant to a message: lexical (FTS5 bm25), semantic, or both.

Lexical: the message's words (stop words and the index's most common terms out) as an OR
query over the chunks; a document
scores its best chunk; documents under 40% of the best score are cut (a weak match on one
common word is not relevance). Semantic (with an `Embedder`): the cosine of the message to every
chunk; a document scores its best chunk and must reach `SEMANTIC_FLOOR` and stay within
`SEMANTIC_MARGIN` of the best. With both, the two rankings are fused by reciprocal rank (a
document must have passed at least one side's cut). At most `k` documents; `score` is 0–1 and
relative to the best hit. These constants were set before the labelled set was scored, and not
changed after (bench/knowledge.py). A query with earlier messages searches their words together
and blends their vectors, each message embedded alone (`Retriever.query_vector`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.core.embedding import Embedder
from gateway.knowledge.vectors import VectorIndex, blend
from vault.knowledge import KnowledgeStore

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP_TEXT = """
    a about after all also am an and any are as at be been before but by can could did do does
    doing for from get got had has have how i if in into is it its just me my no not now of on
    or our out over please should so some than that the their them then there these they this
    those to too up us was we were what when where which who why will with would you your yes ok
    okay hi hello thanks thank tell give need want know let like one two le la les un une des du
    de et est que qui pour dans sur pas au aux ce cette il elle je tu vous nous mon ma mes der
    die das ein eine und ist nicht mit wie ich wir sie es zu den dem el los las una y en por con
    para del se lo"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
LEXICAL_CUT = 0.4
SEMANTIC_FLOOR = 0.80
SEMANTIC_MARGIN = 0.05
RRF_K = 60
MAX_TERMS = 24
# Terms found in more than this share of all chunks are left out of the query (at least the
# MIN_TERMS rarest stay): they add next to nothing to bm25, and ranking every chunk that has
# them is what makes a query slow on a large index.
# Small indexes rank every match quickly: the cutoff starts at this many chunks.
COMMON_SHARE = 0.2
MIN_TERMS = 2
CUTOFF_FROM_CHUNKS = 2000
# A term in more than half of the chunks is always left out on a large index: FTS5's bm25
# gives it an IDF of 1e-6 (log((N - n + 0.5) / (n + 0.5)) is negative), so it only adds
# matches scored near zero — which the relative cut would then present as relevant. A message
# made only of such terms has no lexical match at all.
USELESS_SHARE = 0.5
MAX_CACHED_TERMS = 50_000
# A query over a message and the ones before it: each step back weighs this much of the next
# (chosen before the change was measured, not tuned on the labelled sets).
EARLIER_WEIGHT = 0.5


class Mode(StrEnum):
    LEXICAL = "lexical"
    SEMANTIC = "semantic"
    HYBRID = "hybrid"


def query_terms(text: str) -> list[str]:
    words = [w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOP_WORDS]
    return list(dict.fromkeys(words))[:MAX_TERMS]


def fts_match(text: str) -> str:
    """A safe FTS5 query: an OR of quoted terms, so user text cannot inject FTS syntax."""
    return " OR ".join(f'"{w}"' for w in query_terms(text))


@dataclass(slots=True)
class Hit:
    document: int
    score: float
    chunks: list[int] = field(default_factory=list)  # best first


def _best_per_document(scored: list[tuple[int, int, float]]) -> list[Hit]:
    """(chunk, document, score) in score order -> one hit per document, best first."""
    hits: dict[int, Hit] = {}
    for chunk, document, score in scored:
        hit = hits.setdefault(document, Hit(document, score))
        hit.chunks.append(chunk)
    return sorted(hits.values(), key=lambda h: -h.score)


class Retriever:
    def __init__(self, store: KnowledgeStore, embedder: Embedder | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self._index: VectorIndex | None = None
        self._generation = -1
        # The index's chunk count and each term's document frequency, until it changes:
        # fts5vocab counts a term by walking its whole posting list (~0.5 ms for a common one).
        self._chunks = -1
        self._frequency: dict[str, int] = {}
        self._epoch = 0  # bumped by `invalidate`: counts read before a change are not kept

    @property
    def mode(self) -> Mode:
        return Mode.LEXICAL if self.embedder is None else Mode.HYBRID

    def invalidate(self) -> None:
        """The index changed: reload the vectors and term counts before the next search."""
        self._generation = -1
        self._chunks = -1
        self._frequency.clear()
        self._epoch += 1

    async def search(
        self,
        text: str,
        visible: Collection[str],
        k: int = 3,
        mode: Mode | None = None,
        *,
        earlier: Sequence[str] = (),
    ) -> list[Hit]:
        """The documents relevant to `text` and the `earlier` messages before it (oldest
        first): their words as one query, their vectors blended (`query_vector`)."""
        mode = mode or self.mode
        words = "\n".join([*earlier, text])
        if mode is Mode.LEXICAL:
            return (await self.lexical(words, visible))[:k]
        if mode is Mode.SEMANTIC:
            return (await self.semantic(text, visible, earlier=earlier))[:k]
        # One after the other, the model first. Run at once, the vault's reader thread takes
        # a core from the model's second thread, which then waits for it at every barrier:
        # with the two interleaved query by query on 2,000 documents (two runs of 600 each)
        # at once gave p90 51-57 / p99 69-76 ms, in turn 46-50 / 59-64 ms (p50 the same).
        semantic = await self.semantic(text, visible, earlier=earlier)
        lexical = await self.lexical(words, visible)
        return self._fuse(lexical, semantic)[:k]

    async def lexical(self, text: str, visible: Collection[str]) -> list[Hit]:
        terms = query_terms(text)
        if terms:
            total, frequency = await self.term_frequencies(terms)
            if total >= CUTOFF_FROM_CHUNKS:
                rarest = sorted(terms, key=lambda t: frequency.get(t, 0))
                terms = [
                    t for n, t in enumerate(rarest)
                    if frequency.get(t, 0) <= USELESS_SHARE * total
                    and (n < MIN_TERMS or frequency.get(t, 0) <= COMMON_SHARE * total)
                ]  # fmt: skip
        match = " OR ".join(f'"{w}"' for w in terms)
        rows = await self.store.search(match, visible, limit=60)
        hits = _best_per_document([(r["chunk"], r["document"], r["score"]) for r in rows])
        if not hits or hits[0].score <= 0:
            return []
        best = hits[0].score
        return [
            Hit(h.document, h.score / best, h.chunks) for h in hits if h.score >= best * LEXICAL_CUT
        ]

    async def term_frequencies(self, terms: Collection[str]) -> tuple[int, dict[str, int]]:
        """The index's chunk count and in how many chunks each term occurs (a term absent
        from the mapping occurs nowhere); kept until the index changes."""
        if len(self._frequency) > MAX_CACHED_TERMS:
            self._frequency.clear()
        missing = [t for t in terms if t not in self._frequency]
        if not missing and self._chunks >= 0:
            return self._chunks, self._frequency
        epoch = self._epoch
        total, found = await self.store.term_frequencies(missing)
        fresh = {t: found.get(t, 0) for t in missing}
        if epoch != self._epoch:  # the index changed meanwhile: keep nothing, count afresh
            return await self.store.term_frequencies(terms)
        self._chunks = total
        self._frequency.update(fresh)
        return total, self._frequency

    async def semantic(
        self, text: str, visible: Collection[str], *, earlier: Sequence[str] = ()
    ) -> list[Hit]:
        if self.embedder is None or not text.strip():
            return []
        return await self.semantic_near(await self.query_vector(text, earlier), visible)

    async def semantic_near(self, vector: bytes, visible: Collection[str]) -> list[Hit]:
        """`semantic` for a query vector already made (`query_vector`)."""
        index = await self._vectors()
        found = index.search(vector, visible, limit=60)
        hits = _best_per_document([(h.chunk, h.document, h.similarity) for h in found])
        if not hits or hits[0].score < SEMANTIC_FLOOR:
            return []
        best = hits[0].score
        return [
            Hit(h.document, h.score, h.chunks)
            for h in hits
            if h.score >= SEMANTIC_FLOOR and h.score >= best - SEMANTIC_MARGIN
        ]

    async def closeness(self, vector: bytes, documents: Collection[int]) -> dict[int, float]:
        """How close each of `documents` (already within the caller's scope) is to a query
        vector (`query_vector`): its best chunk's cosine."""
        if self.embedder is None or not documents:
            return {}
        return (await self._vectors()).closest(vector, documents)

    async def query_vector(self, text: str, earlier: Sequence[str] = ()) -> bytes:
        """One query vector for `text` and the messages before it: the weighted mean of each
        message's own vector (each step back weighs `EARLIER_WEIGHT` times the next),
        renormalised. Each message is embedded on its own text, never concatenated, so the
        embedder's cache serves every message after its first turn (and to the analyzer and
        the suggestions): a turn pays for one new embedding at most."""
        assert self.embedder is not None
        texts = [*(t for t in earlier if t.strip()), text]
        vectors = await self.embedder.embed(texts, query=True)
        if len(vectors) == 1:
            return vectors[0]
        weights = [EARLIER_WEIGHT ** (len(texts) - 1 - n) for n in range(len(texts))]
        return blend(vectors, weights)

    async def _vectors(self) -> VectorIndex:
        assert self.embedder is not None
        if self._index is None or self._generation < 0:
            rows = await self.store.vectors(self.embedder.model)
            self._index = VectorIndex(rows, self.embedder.dim)
            self._generation = 0
        return self._index

    @staticmethod
    def _fuse(lexical: list[Hit], semantic: list[Hit]) -> list[Hit]:
        fused: dict[int, Hit] = {}
        for ranking in (lexical, semantic):
            for rank, hit in enumerate(ranking):
                merged = fused.setdefault(hit.document, Hit(hit.document, 0.0))
                merged.score += 1.0 / (RRF_K + rank + 1)
                merged.chunks.extend(c for c in hit.chunks if c not in merged.chunks)
        ranked = sorted(fused.values(), key=lambda h: -h.score)
        if not ranked:
            return []
        best = ranked[0].score
        return [Hit(h.document, h.score / best, h.chunks) for h in ranked]
