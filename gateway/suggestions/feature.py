"""Inline context suggestions as a feature.

It builds the `Finder` (kept on the feature: `app.feature(SuggestionsFeature).finder` is how
other features reach it) over the knowledge feature's index, retrieval and scope rules, the
memories and the suggestion store; and contributes the block under replies (a step), `/use`,
`/dismiss`, `/suggestions`, the `suggestions` context provider (used items), the
`context_suggest` and `suggestion_feedback` tools (offered while suggestions are on and
something could be suggested: `presence.py`), the `suggestions` section of `/admin stats`
and `GET /stats` (per-type acceptance, demoted types), and the `iris_suggestions_total`
metric. `feedback` is what the platforms' Use/Dismiss buttons call.
"""

from __future__ import annotations

from typing import Any

from gateway.core.metrics import LabelValues
from gateway.core.scope import Scope
from gateway.features.contributions import Contributions, Gauge
from gateway.knowledge.feature import KnowledgeFeature
from gateway.suggestions.feedback import Feedback, UsedProvider, tools
from gateway.suggestions.finder import Finder, ItemType
from gateway.suggestions.inline import Inline
from gateway.suggestions.presence import Presence
from gateway.suggestions.settings import SuggestionsSection
from gateway.suggestions.tuning import Tuning, demoted_types
from vault.audit import AuditLog
from vault.suggestions import SuggestionStore


class SuggestionsFeature:
    name = "suggestions"

    def __init__(self, settings: SuggestionsSection, knowledge: KnowledgeFeature) -> None:
        self.settings = settings
        self.knowledge = knowledge
        self.finder: Finder | None = None  # built in `contribute`

    def contribute(self, c: Contributions) -> None:
        s = c.services
        k = self.knowledge  # contributed before this feature: its pieces exist
        self.store = SuggestionStore(s.vault)
        self.finder = finder = Finder(
            knowledge=k.store,
            retriever=k.retriever,
            rules=k.rules,
            memories=s.memories,
            store=self.store,
            embedder=k.embedder,
        )
        self.presence = presence = Presence(
            retriever=k.retriever, memories=s.memories, store=self.store
        )
        self.tuning = Tuning(self.store, self.settings)
        self.feedback = Feedback(self.store, self.tuning, AuditLog(s.vault))
        self.inline = Inline(
            finder=finder,
            presence=presence,
            store=self.store,
            tuning=self.tuning,
            conversations=s.conversations,
            traces=s.traces,
            delivery=s.delivery,
            hint_for=s.hint_for,
            settings=self.settings,
        )
        c.command(*self.feedback.commands())
        c.tool(*tools(finder, self.feedback, self.settings.min_relevance, self._offer_tools))
        c.provider(UsedProvider(self.store))
        c.stats("suggestions", self.stats)
        c.gauge(
            Gauge(
                "iris_suggestions_total",
                "Inline context suggestions by item type and status.",
                ("type", "status"),
                self._gauge,
                kind="counter",
            )
        )
        if self.settings.enabled:
            c.step(self.inline.step())

    async def _offer_tools(self, scope: Scope) -> bool:
        """The suggestion tools, while suggestions are on and something could be suggested
        here (documents, or the user's memories; the follow-ups are in every request)."""
        return self.settings.enabled and await self.presence.offerable(scope)

    async def stats(self, since_ms: int) -> dict[str, Any]:
        counts = await self.store.type_counts(since_ms)
        demoted = demoted_types(counts, self.settings)
        return {
            kind: {
                "shown": n.shown,
                "used": n.used,
                "dismissed": n.dismissed,
                "acceptance": round(n.used / n.shown, 3) if n.shown else None,
                "demoted": kind in demoted,
            }
            for kind, n in sorted(counts.items())
        }

    async def _gauge(self) -> dict[LabelValues, float]:
        counts = await self.store.type_counts(0)
        out: dict[LabelValues, float] = {}
        for kind in ItemType:
            n = counts.get(kind.value)
            out[(kind.value, "shown")] = float(n.shown if n else 0)
            out[(kind.value, "used")] = float(n.used if n else 0)
            out[(kind.value, "dismissed")] = float(n.dismissed if n else 0)
        return out
