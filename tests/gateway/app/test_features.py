"""Which features run, and what they say about the optional parts they lack."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from gateway.analyzer.feature import AnalyzerFeature
from gateway.app import features
from gateway.knowledge import local_embedder
from gateway.knowledge.feature import KnowledgeFeature
from gateway.knowledge.retrieval import Mode
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import documents_in, write


def analyzer_of(built: Sequence[object]) -> AnalyzerFeature:
    return next(f for f in built if isinstance(f, AnalyzerFeature))


@pytest.mark.parametrize("semantic", [True, False])
def test_a_missing_embedder_is_said_once_and_the_analyzer_runs_lexically(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    semantic: bool,
) -> None:
    monkeypatch.setattr(features, "open_local_embedder", lambda threads: None)
    config = make_config(tmp_path, analyzer={"semantic": semantic})
    with caplog.at_level(logging.INFO, logger=features.__name__):
        analyzer = analyzer_of(features.default_features(config))
    said = [r.getMessage() for r in caplog.records if "semantic extra" in r.getMessage()]
    # Said, not warned: a plain install is a supported one (the README's first command).
    assert all(r.levelno == logging.INFO for r in caplog.records)
    assert analyzer.embedder is None
    assert len(said) == (1 if semantic else 0)  # switched off on purpose: nothing to say


async def test_without_the_extra_documents_are_found_lexically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default features, as `iris run` builds them, on a machine without the extra."""
    monkeypatch.setattr(local_embedder, "AVAILABLE", False)
    config = make_config(tmp_path, context={"documents": ["docs/**/*.md"]})
    config = type(config)(settings=config.settings, secrets=config.secrets, source=tmp_path / "c")
    write(tmp_path, "runbooks/kafka.md", "# Kafka lag runbook\n\nScale the consumer group.\n")
    llm, channel = FakeLLM(), MemoryChannel()
    async with app_with(config, channel, llm) as app:
        knowledge = app.feature(KnowledgeFeature)
        assert knowledge.embedder is None and knowledge.retriever.mode is Mode.LEXICAL
        await app.router.submit(inbound("kafka consumer group lag?"))
    assert list(documents_in(llm.requests[-1])) == ["docs/runbooks/kafka.md"]
