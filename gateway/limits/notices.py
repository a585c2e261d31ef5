"""What users read about limits: the over-budget and slow-down notices, the `/status` lines.

Short, fixed texts that say which budget, when it resets in the user's own time zone, and that
the message is saved. They never carry exception text or another user's figures (the global
budget is named, not its amounts).
"""

from __future__ import annotations

from collections.abc import Sequence
from zoneinfo import ZoneInfo

from gateway.limits.meters import Limit, Meter
from gateway.limits.windows import when_local

SLOW_DOWN = (
    "You're sending messages faster than I can take them ({limit} a minute). Your message is "
    "saved, but I won't answer it; please wait a minute and write again."
)

_OVER = {
    Limit.USER_TOKENS_PER_DAY: "You've used today's allowance of {cap} tokens.",
    Limit.USER_USD_PER_DAY: "You've used today's budget of {cap}.",
    Limit.USER_USD_PER_MONTH: "You've used this month's budget of {cap}.",
    Limit.GLOBAL_USD_PER_DAY: "I've used today's budget for everyone.",
}


def usd(micros: int) -> str:
    return dollars(micros / 1_000_000)


def dollars(value: float) -> str:
    """To the cent; an amount under a cent to its first significant digits, down to the
    micro-dollar the meters count in (a tiny cap or spend must not read as $0.00)."""
    if 0 < abs(value) < 0.01:
        return "$" + f"{value:.6f}".rstrip("0")
    return f"${value:,.2f}"


def amount(meter: Meter, value: int) -> str:
    return f"{value:,}" if meter.limit.in_tokens else usd(value)


def over_budget(meter: Meter, zone: ZoneInfo) -> str:
    head = _OVER[meter.limit].format(cap=amount(meter, meter.cap))
    return (
        f"{head} It resets at {when_local(meter.resets_at_ms, zone)}. Your message is saved, "
        "but I can't answer until then."
    )


_PERIOD = {
    Limit.USER_TOKENS_PER_DAY: "today",
    Limit.USER_USD_PER_DAY: "today",
    Limit.USER_USD_PER_MONTH: "this month",
    Limit.GLOBAL_USD_PER_DAY: "today for everyone",
}


def status_line(meters: Sequence[Meter], zone: ZoneInfo, *, exempt: bool) -> str:
    """`/status`: what is left of each of the user's budgets, or what they spent."""
    mine = [m for m in meters if m.limit is not Limit.GLOBAL_USD_PER_DAY]
    spent_today = next((m for m in mine if m.limit is Limit.USER_USD_PER_DAY), None)
    spent = f"spent {usd(spent_today.committed)} today" if spent_today else ""
    if exempt:
        return f"Budget: no limits for admins ({spent})" if spent else "Budget: no limits"
    parts = [
        f"{amount(m, m.remaining)} of {amount(m, m.cap)}{' tokens' if m.limit.in_tokens else ''}"
        f" left {_PERIOD[m.limit]}"
        for m in mine
        if m.cap > 0
    ]
    day = next((m for m in mine if m.cap > 0 and m.limit is not Limit.USER_USD_PER_MONTH), None)
    resets = f"; the day resets at {when_local(day.resets_at_ms, zone)}" if day else ""
    everyone = next((m for m in meters if m.limit is Limit.GLOBAL_USD_PER_DAY), None)
    if everyone is not None and everyone.exhausted:
        # Its day is the gateway's, not the user's: its own reset time, as the notice says.
        until = when_local(everyone.resets_at_ms, zone)
        parts.append(f"the budget for everyone is used up until {until}")
        resets = resets.replace("the day resets", "your own day resets")
    if not parts:
        return f"Budget: no limits ({spent})" if spent else "Budget: no limits"
    return "Budget: " + ", ".join(parts) + resets
