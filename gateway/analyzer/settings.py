"""The `[analyzer]` configuration section, owned by the analyzer feature."""

from __future__ import annotations

from pydantic import Field

from gateway.features.settings import Section


class AnalyzerSection(Section):
    enabled: bool = True
    # Use message embeddings when the `semantic` extra is installed; false: lexical rules only.
    semantic: bool = True
    # The share of one core the embeddings of chat messages may take (a token bucket of
    # embedding time, `share.py`); when it is spent a message is judged by the rules alone.
    # 1 = no limit, 0 = never embed chat messages.
    embed_share: float = Field(0.25, ge=0, le=1)
    # With embeddings, let the learned models shipped with Iris decide (`learned.py`) when
    # they were trained on the embedding model in use; false: the similarity thresholds below.
    learned: bool = True
    topic_shift_threshold: float = Field(0.0, ge=0, le=1)
    semantic_threshold: float = Field(0.84, ge=-1, le=1)
    complaint_threshold: float = Field(0.88, ge=-1, le=1)
    confirm_band: float = Field(0.05, ge=0, le=1)
    min_keywords: int = Field(5, ge=1)
    recent_messages: int = Field(4, ge=1, le=20)
    cooldown_messages: int = Field(8, ge=0)
    cooldown_minutes: float = Field(30, ge=0)
    confirm_model: str = ""
    confirm_timeout_s: float = Field(5.0, gt=0)
