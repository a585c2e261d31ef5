"""Self-tuning: what feedback does to the next suggestions.

Two rules, both applied to a candidate's relevance before `min_relevance` is checked:

- Demotion per type: over the last 30 days, a type shown at least `demote_min_shown` times whose
  dismissals exceed `demote_ratio` times its uses (uses counted at least once, so a type never
  used is demoted once it has enough dismissals) has its relevance multiplied by
  `demote_factor`. The counts are read at most once per `REFRESH_MS`; the rule lifts itself
  when uses catch up.
- Similar to a dismissal: a candidate sharing most of its title words with an item dismissed in
  this chat loses up to `SIMILAR_PENALTY` (the dismissed item itself never comes back there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.suggestions.finder import Candidate
from gateway.suggestions.relevance import terms
from gateway.suggestions.settings import SuggestionsSection
from vault.suggestions import SuggestionStore, TypeCounts

WINDOW_MS = 30 * 86_400_000
REFRESH_MS = 10 * 60_000
SIMILAR_PENALTY = 0.3


def demoted_types(counts: dict[str, TypeCounts], s: SuggestionsSection) -> frozenset[str]:
    return frozenset(
        kind
        for kind, c in counts.items()
        if c.shown >= s.demote_min_shown and c.dismissed > s.demote_ratio * max(c.used, 1)
    )


def similarity(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


class Tuning:
    def __init__(self, store: SuggestionStore, settings: SuggestionsSection) -> None:
        self.store = store
        self.settings = settings
        self._demoted: frozenset[str] = frozenset()
        self._read_ms: int | None = None

    async def demoted(self, now_ms: int) -> frozenset[str]:
        if self._read_ms is None or now_ms - self._read_ms >= REFRESH_MS:
            counts = await self.store.type_counts(now_ms - WINDOW_MS)
            self._demoted = demoted_types(counts, self.settings)
            self._read_ms = now_ms
        return self._demoted

    def forget(self) -> None:
        """Feedback arrived: read the counts again next time."""
        self._read_ms = None

    async def adjust(
        self, chat: int, candidates: Sequence[Candidate], now_ms: int
    ) -> list[Candidate]:
        demoted = await self.demoted(now_ms)
        dismissed = [terms(t) for t in await self.store.dismissed_titles(chat)]
        out = []
        for c in candidates:
            relevance = c.relevance
            if c.type.value in demoted:
                relevance *= self.settings.demote_factor
            if dismissed:
                mine = terms(f"{c.title} {c.summary}")
                closest = max(similarity(mine, d) for d in dismissed)
                relevance -= SIMILAR_PENALTY * closest
            out.append(replace(c, relevance=round(max(relevance, 0.0), 4)))
        return sorted(out, key=lambda c: -c.relevance)
