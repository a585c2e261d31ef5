"""The `[proactive]` configuration section, owned by the proactive feature."""

from __future__ import annotations

from pydantic import Field, field_validator

from gateway.core.clock import check_timezone
from gateway.features.settings import Section, check_cron


class DormancySection(Section):
    """`[proactive.dormancy]`: the passive scan's dormant-user detector."""

    enabled: bool = True


class ProactiveSection(Section):
    enabled: bool = True
    poll_interval_s: float = Field(60.0, gt=0)
    scan_cron: str = "0 */6 * * *"
    scan_timezone: str = "UTC"
    default_timezone: str = "UTC"
    quiet_start: int = Field(22, ge=0, le=23)
    quiet_end: int = Field(8, ge=0, le=23)
    per_user_daily: int = Field(3, ge=0)
    global_daily: int = Field(100, ge=0)
    min_spacing_minutes: float = Field(90, ge=0, le=24 * 60)
    release_window_minutes: float = Field(120, ge=0, le=12 * 60)
    confidence_threshold: float = Field(0.5, ge=0, le=1)
    default_confidence: float = Field(0.8, ge=0, le=1)
    max_age_days: float = Field(7, gt=0)
    dormancy_days: float = Field(7, gt=0)
    dormancy: DormancySection = DormancySection()
    unanswered_hours: float = Field(24, gt=0)
    engagement_drop_ratio: float = Field(0.3, gt=0, le=1)
    max_per_tick: int = Field(20, ge=1)
    concurrency: int = Field(8, ge=1, le=256)
    lease_s: float = Field(60, gt=0)
    jitter_max_minutes: float = Field(30, ge=0)
    gate_max_rounds: int = Field(4, ge=1, le=20)

    @field_validator("default_timezone", "scan_timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return check_timezone(value)

    @field_validator("scan_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return check_cron(value)
