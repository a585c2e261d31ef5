"""The base of every configuration section, and the validators features share.

A feature owns its section (`proactive/settings.py`, `gateway/analyzer/settings.py`); the
composition root's `Settings` (`gateway/app/config.py`) only lists the sections. Sections are
frozen and forbid unknown keys, so a typo is a one-line error naming the key.
"""

from __future__ import annotations

from croniter import croniter
from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_cron(value: str) -> str:
    """Return `value` if it is a valid 5-field cron expression; raise ValueError otherwise."""
    if not croniter.is_valid(value, strict=True):
        raise ValueError("not a valid cron expression (e.g. '0 */6 * * *')")
    return value
