"""Which features run, and what they say about the optional parts they lack."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from gateway.analyzer.feature import AnalyzerFeature
from gateway.app import features
from tests.conftest import make_config


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
    with caplog.at_level(logging.WARNING, logger=features.__name__):
        analyzer = analyzer_of(features.default_features(config))
    said = [r.getMessage() for r in caplog.records if "semantic extra" in r.getMessage()]
    assert analyzer.embedder is None
    assert len(said) == (1 if semantic else 0)  # switched off on purpose: nothing to say
