"""One budget in one window, and the rule that admits a model call against it.

A meter holds what settled calls spent (`committed`) and what the calls in flight reserved
(`reserved`: their estimates, `gateway/limits/prices.py`). A call is

- refused when the window is already spent (`committed >= cap`);
- admitted when its estimate fits beside everything committed and reserved;
- admitted as the window's *last call* when it does not fit but nothing else is in flight: it
  may take the total over the cap, and then every later call is refused;
- otherwise made to wait until a call in flight settles, and judged again.

Because estimates are upper bounds, calls admitted by fitting never cross the cap together,
and a last call runs alone: however many turns race for the last tokens, at most one call
ends over the cap. A cap of 0 switches the meter off; it still counts, for `/status`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Limit(StrEnum):
    USER_TOKENS_PER_DAY = "user_tokens_per_day"
    USER_USD_PER_DAY = "user_usd_per_day"
    USER_USD_PER_MONTH = "user_usd_per_month"
    GLOBAL_USD_PER_DAY = "global_usd_per_day"
    USER_MESSAGES_PER_MINUTE = "user_messages_per_minute"

    @property
    def in_tokens(self) -> bool:
        return self is Limit.USER_TOKENS_PER_DAY


class Verdict(StrEnum):
    ADMIT = "admit"
    WAIT = "wait"
    REFUSE = "refuse"


@dataclass(slots=True)
class Meter:
    limit: Limit
    window: str  # the window's label: `2026-03-08`, `2026-03`
    resets_at_ms: int
    cap: int  # tokens, or micro-dollars; 0: no limit
    committed: int = 0
    reserved: int = 0
    in_flight: int = 0

    @property
    def exhausted(self) -> bool:
        return self.cap > 0 and self.committed >= self.cap

    @property
    def remaining(self) -> int:
        return max(0, self.cap - self.committed)

    def verdict(self, amount: int) -> Verdict:
        if self.cap <= 0:
            return Verdict.ADMIT
        if self.committed >= self.cap:
            return Verdict.REFUSE
        if self.committed + self.reserved + amount <= self.cap or self.in_flight == 0:
            return Verdict.ADMIT
        return Verdict.WAIT

    def reserve(self, amount: int) -> None:
        self.reserved += amount
        self.in_flight += 1

    def settle(self, reserved: int, spent: int) -> None:
        self.reserved -= reserved
        self.in_flight -= 1
        self.committed += spent


def judge(checks: Sequence[tuple[Meter, int]]) -> tuple[Verdict, Meter | None]:
    """The verdict over several meters: any refusal wins, then any wait; with the meter."""
    waiting: Meter | None = None
    for meter, amount in checks:
        verdict = meter.verdict(amount)
        if verdict is Verdict.REFUSE:
            return Verdict.REFUSE, meter
        if verdict is Verdict.WAIT and waiting is None:
            waiting = meter
    return (Verdict.WAIT, waiting) if waiting is not None else (Verdict.ADMIT, None)
