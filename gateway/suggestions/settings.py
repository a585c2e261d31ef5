"""`[suggestions]`: inline context suggestions, owned by the suggestions feature.

`max_per_turn` items at most under a reply, each at least `min_relevance`; the same item at
most once per chat per `item_cooldown_hours`, one block per chat per `chat_cooldown_minutes`.
`demote_*` is the self-tuning rule (README): a type shown at least `demote_min_shown` times in
the last 30 days whose dismissals exceed `demote_ratio` times its uses has its relevance
multiplied by `demote_factor`.
"""

from __future__ import annotations

from pydantic import Field

from gateway.features.settings import Section


class SuggestionsSection(Section):
    enabled: bool = True
    max_per_turn: int = Field(2, ge=1, le=5)
    min_relevance: float = Field(0.5, ge=0.0, le=1.0)
    item_cooldown_hours: float = Field(24.0, ge=0)
    chat_cooldown_minutes: float = Field(10.0, ge=0)
    demote_min_shown: int = Field(10, ge=1)
    demote_ratio: float = Field(3.0, ge=1.0)
    demote_factor: float = Field(0.75, gt=0.0, le=1.0)
