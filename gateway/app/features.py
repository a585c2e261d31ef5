"""Which features run: the built-in ones, each configured from its own section.

Part of the composition root. The order matters where features meet in the pipeline: their
steps run in this order after the commands and before the agent.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gateway.analyzer.feature import AnalyzerFeature
from gateway.analyzer.settings import AnalyzerSection
from gateway.app.config import Config
from gateway.features.contributions import Feature
from gateway.knowledge.feature import KnowledgeFeature
from gateway.knowledge.local_embedder import LocalEmbedder, open_local_embedder
from gateway.knowledge.spare_core import SpareCore
from gateway.limits.feature import LimitsFeature
from gateway.subscriptions.feature import SubscriptionsFeature
from gateway.suggestions.feature import SuggestionsFeature
from proactive.feature import ProactiveFeature

log = logging.getLogger(__name__)


def default_features(config: Config) -> list[Feature]:
    """The built-in features, each configured from its own section."""
    s = config.settings
    # Limits first: their step refuses a message before the analyzer's or the agent's calls.
    limits = LimitsFeature(
        s.limits,
        admins=s.auth.admins,
        default_timezone=s.proactive.default_timezone,
        model_deadline_s=s.llm.turn_deadline_seconds,  # how long a budget hold may last
    )
    # One local model (when the `semantic` extra is installed) for every feature that embeds.
    embedder = open_local_embedder(s.context.embed_threads)
    knowledge = KnowledgeFeature(
        s.context,
        base=(config.source.parent if config.source else Path.cwd()).resolve(),
        embedder=embedder,
    )
    analyzer = _analyzer(s.analyzer, embedder)
    # Suggestions after knowledge: the finder uses its index, retrieval and scope rules.
    suggestions = SuggestionsFeature(s.suggestions, knowledge)
    # Subscriptions after both: they watch the rescan and ask the finder.
    subscriptions = SubscriptionsFeature(
        s.subscriptions,
        visible=lambda scope: knowledge.rules.visible(scope),
        finder=lambda: suggestions.finder,
        embedder=knowledge.embedder,
        watch_documents=lambda listener: knowledge.indexer.changed.append(listener),
    )
    return [
        limits,
        analyzer,
        ProactiveFeature(s.proactive),
        knowledge,
        suggestions,
        subscriptions,
    ]


def _analyzer(settings: AnalyzerSection, embedder: LocalEmbedder | None) -> AnalyzerFeature:
    """The analyzer, bounded by the local model's state (`share.py`): whether a core is free
    of everything but the model's own work (`spare_core.py`), and the model's queue, whichever
    feature filled it."""
    if embedder is None:
        if settings.semantic:
            log.info(
                "analyzer: the semantic extra is not installed (pip install -e '.[semantic]'); "
                "topic shifts and complaints are judged by the lexical rules"
            )
        return AnalyzerFeature(settings)
    spare = SpareCore(excluded=lambda: embedder.cpu_seconds, excluded_now=embedder.threads_running)
    return AnalyzerFeature(settings, embedder=embedder, spare=spare, queue=lambda: embedder.jobs)
