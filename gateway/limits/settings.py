"""The `[limits]` configuration section and its price table, owned by the limits feature.

Every limit is a non-negative number and 0 switches it off. Prices are US dollars per million
tokens, as Anthropic lists them; the defaults below are the public list prices of the current
models (platform.claude.com "Pricing" and each model's overview page, checked November 2026):

| model             | input | output | cache write (5 min) | cache read |
|-------------------|-------|--------|---------------------|------------|
| claude-opus-5-5   | 4.00  | 20.00  | 5.00                | 0.20       |
| claude-sonnet-5-5 | 2.00  | 10.00  | 2.50                | 0.10 (1)   |
| claude-haiku-5-5  | 0.10  | 0.50   | 0.125               | 0.01 (2)   |
| claude-opus-4-5   | 5.00  | 25.00  | 6.25                | 0.50       |
| claude-sonnet-4-5 | 3.00  | 15.00  | 3.75                | 0.30       |
| claude-haiku-4-5  | 1.00  | 5.00   | 1.25                | 0.10       |

(1) cut from 0.20 on 2026-10-07. (2) for prompts up to 100k tokens; longer prompts cost five
times as much, far beyond what `[context] max_tokens` sends by default.

Iris writes the prompt cache with the default 5-minute lifetime, so that is the write price.
An entry in `[limits.prices]` adds a model or replaces a default one; leaving out the cache
prices derives them the usual way (writes 1.25x input, reads 0.1x input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator

from gateway.features.settings import Section


class ModelPrice(Section):
    """US dollars per million tokens."""

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cache_read: float = Field(ge=0, allow_inf_nan=False)
    cache_write: float = Field(ge=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _derive_cache_prices(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        try:
            base = float(data["input"])
        except (KeyError, TypeError, ValueError):
            base = -1.0
        if not base >= 0:  # a bad input price is reported once, on its own key
            return {"cache_read": 0.0, "cache_write": 0.0, **data}
        return {"cache_read": base * 0.1, "cache_write": base * 1.25, **data}


def _price(input: float, output: float, cache_write: float, cache_read: float) -> ModelPrice:
    return ModelPrice(input=input, output=output, cache_write=cache_write, cache_read=cache_read)


DEFAULT_PRICES: dict[str, ModelPrice] = {
    "claude-opus-5-5": _price(4.0, 20.0, 5.0, 0.20),
    "claude-sonnet-5-5": _price(2.0, 10.0, 2.50, 0.10),
    "claude-haiku-5-5": _price(0.10, 0.50, 0.125, 0.01),
    "claude-opus-4-5": _price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-4-5": _price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": _price(1.0, 5.0, 1.25, 0.10),
}


class LimitsSection(Section):
    # Per user, per day of the user's own time zone: every token the model read or wrote.
    user_tokens_per_day: int = Field(0, ge=0)
    # Per user in US dollars: per local day and per local calendar month.
    user_usd_per_day: float = Field(5.0, ge=0, allow_inf_nan=False)
    user_usd_per_month: float = Field(50.0, ge=0, allow_inf_nan=False)
    # Everyone together, per UTC day.
    global_usd_per_day: float = Field(50.0, ge=0, allow_inf_nan=False)
    # Messages a user may send per minute before Iris stops answering for a moment.
    user_messages_per_minute: int = Field(0, ge=0)
    # Admins ([auth] admins and the local terminal) skip every limit when true.
    admins_exempt: bool = False
    prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(DEFAULT_PRICES))

    @field_validator("prices", mode="before")
    @classmethod
    def _over_defaults(cls, value: Any) -> Any:
        """Entries in the file add to the defaults (or replace one), never remove them all."""
        if isinstance(value, Mapping):
            for name in value:
                if not str(name).strip():
                    raise ValueError("a model id must not be empty")
            return {**DEFAULT_PRICES, **value}
        return value

    @property
    def uses_money(self) -> bool:
        return any((self.user_usd_per_day, self.user_usd_per_month, self.global_usd_per_day))

    def unpriced(self, models: Mapping[str, str]) -> list[str]:
        """Config problems: a model in use (`key -> model id`, empty = unused) with no price
        while a USD limit needs one."""
        if not self.uses_money:
            return []
        return [
            f"{key}: no price for model '{model}' in [limits.prices]; add one "
            "(input, output per million tokens) or set the USD limits to 0"
            for key, model in models.items()
            if model and model not in self.prices
        ]
