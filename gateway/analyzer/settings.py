"""The `[analyzer]` configuration section, owned by the analyzer feature."""

from __future__ import annotations

from pydantic import Field

from gateway.features.settings import Section


class AnalyzerSection(Section):
    enabled: bool = True
    topic_shift_threshold: float = Field(0.2, ge=0, le=1)
    min_keywords: int = Field(5, ge=1)
    recent_messages: int = Field(4, ge=1, le=20)
    cooldown_messages: int = Field(8, ge=0)
    cooldown_minutes: float = Field(30, ge=0)
    confirm_model: str = ""
    confirm_timeout_s: float = Field(5.0, gt=0)
