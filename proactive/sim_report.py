"""The simulator's report: invariants checked from the raw send log, by code of its own.

Every message the channel received (time, idempotency key) is mapped back to its item and its
user's zone and settings, then checked with this module's own wall-clock arithmetic —
`datetime.fromtimestamp(t, ZoneInfo(zone))`, nothing from `proactive/policy.py` — so a bug in
the policy's time helpers shows up as a violation instead of agreeing with itself:

- quiet hours: a send inside the user's quiet window (their own setting, or the configured
  default), unless it is a reminder the user asked for at that exact time;
- quotas: more gated sends (everything but user-requested reminders) to one user in one of
  their local calendar days than `per_user_daily`, or to everyone in one UTC day than
  `global_daily`;
- spacing: a gated send less than `min_spacing` after the same user's previous message of any
  kind (the rule the engine applies; reminders themselves are never held back);
- duplicates (one idempotency key twice) and items left claimed or delivering.

Also: how sends bunch per user (most in any 60 minutes, the smallest gap between two gated
sends, as a minimum over users and its 5th percentile), the share of gated sends in the first
hour after quiet hours, sends per local hour and per day (gated and reminders apart), and
engagement per day. `render_text` prints it; `proactive/sim_html.py` draws it.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from proactive.policy import PolicyConfig
from vault.proactive.report import ReportItem
from vault.proactive.store import TERMINAL

INTENT_OUTCOMES = tuple(status.value for status in TERMINAL)
DAY = 86_400_000
MINUTE = 60_000


@dataclass(slots=True)
class SimUser:
    index: int
    name: str
    zone: str
    pk: int
    chat_pk: int
    session_pk: int = 0
    busy: bool = False


@dataclass(frozen=True, slots=True)
class Send:
    at_ms: int
    key: str


@dataclass(frozen=True, slots=True)
class Delivered:
    """A message the channel received, with what the check reads of its item and its user."""

    at_ms: int
    key: str  # the item's name: the same in a run of a shard of the users as in the whole
    user: int
    zone: str
    reminder: bool
    exact: bool
    window: tuple[int, int] | None  # the user's quiet hours


def delivered(
    send: Send, item: ReportItem, policy: PolicyConfig, *, key: str | None = None,
    user: int | None = None,
) -> Delivered:  # fmt: skip
    return Delivered(
        at_ms=send.at_ms, key=send.key if key is None else key,
        user=item.user_pk if user is None else user,
        zone=item.timezone or policy.default_timezone, reminder=item.kind == "user_reminder",
        exact=item.exact_time, window=quiet_window(item, policy),
    )  # fmt: skip


def quiet_window(item: ReportItem, policy: PolicyConfig) -> tuple[int, int] | None:
    """The user's quiet hours, read from their settings here (not by the policy's parser)."""
    own = item.settings.get("quiet_hours")
    if own == "off":
        return None
    if isinstance(own, list) and len(own) == 2:
        start, end = int(own[0]), int(own[1])
    else:
        start, end = policy.quiet_start, policy.quiet_end
    return None if start == end else (start, end)


def is_quiet(hour: int, window: tuple[int, int] | None) -> bool:
    if window is None:
        return False
    start, end = window
    if start < end:
        return start <= hour < end
    return hour >= start or hour < end


def percentile(values: list[int], share: float) -> int | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass
class Tally:
    """What the channel received, checked against quiet hours, quotas and spacing."""

    quiet_violations: int = 0
    quota_violations: int = 0
    spacing_violations: int = 0
    gated: int = 0
    reminders: int = 0
    max_per_user_day: int = 0
    max_per_user_hour: int = 0
    max_gated_per_user_hour: int = 0
    first_hour_after_quiet: int = 0
    min_gaps: list[int] = field(default_factory=list)  # per user: smallest gated gap, minutes
    gap_counts: Counter[str] = field(default_factory=Counter)
    per_hour: dict[str, list[int]] = field(default_factory=dict)
    per_day: dict[str, list[int]] = field(default_factory=dict)


GAP_BUCKETS = ((90, "< 90 min"), (120, "90–119 min"), (180, "2–3 h"), (360, "3–6 h"),
               (720, "6–12 h"), (1440, "12–24 h"), (math.inf, "≥ 24 h"))  # fmt: skip


def _gap_bucket(minutes: float) -> str:
    return next(label for bound, label in GAP_BUCKETS if minutes < bound)


def _most_within(times: list[int], span_ms: int) -> int:
    """The most of these (sorted) times inside any window of `span_ms`."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= span_ms:
            first += 1
        most = max(most, last - first + 1)
    return most


def tally(
    sends: list[Send], items: dict[str, ReportItem], policy: PolicyConfig, start_ms: int,
    days: int,
) -> Tally:  # fmt: skip
    """`tally_delivered` of a raw send log and the items its keys name."""
    log = [delivered(send, items[send.key], policy) for send in sends]
    return tally_delivered(log, policy, start_ms, days)


def tally_delivered(
    sends: list[Delivered], policy: PolicyConfig, start_ms: int, days: int
) -> Tally:
    result = Tally(
        per_hour={"gated": [0] * 24, "reminders": [0] * 24},
        per_day={"gated": [0] * days, "reminders": [0] * days},
    )
    zones: dict[str, ZoneInfo] = {}
    per_user_day: Counter[tuple[int, str]] = Counter()
    per_utc_day: Counter[int] = Counter()
    by_user: dict[int, list[tuple[int, bool]]] = {}
    # Stable: one user's sends at the same instant keep the channel's order (they are
    # sequential in the engine, so their order is the same in every run).
    for send in sorted(sends, key=lambda s: (s.at_ms, s.user)):
        zone = zones.setdefault(send.zone, ZoneInfo(send.zone))
        wall = datetime.fromtimestamp(send.at_ms / 1000, zone)
        reminder, window = send.reminder, send.window
        if is_quiet(wall.hour, window) and not (reminder and send.exact):
            result.quiet_violations += 1
        kind = "reminders" if reminder else "gated"
        result.per_hour[kind][wall.hour] += 1
        day = (send.at_ms - start_ms) // DAY
        if 0 <= day < days:
            result.per_day[kind][day] += 1
        by_user.setdefault(send.user, []).append((send.at_ms, reminder))
        if reminder:  # reminders the user asked for are exempt from quotas and spacing
            result.reminders += 1
            continue
        result.gated += 1
        if window is not None and wall.hour == window[1]:
            result.first_hour_after_quiet += 1
        per_user_day[(send.user, wall.date().isoformat())] += 1
        per_utc_day[send.at_ms // DAY] += 1
    result.quota_violations = sum(n > policy.per_user_daily for n in per_user_day.values())
    result.quota_violations += sum(n > policy.global_daily for n in per_utc_day.values())
    result.max_per_user_day = max(per_user_day.values(), default=0)
    for user in sorted(by_user):
        _per_user(result, by_user[user], policy)
    return result


def _per_user(result: Tally, sends: list[tuple[int, bool]], policy: PolicyConfig) -> None:
    """Spacing and bunching for one user's sends (time order)."""
    times = [at for at, _ in sends]
    gated = [at for at, reminder in sends if not reminder]
    result.max_per_user_hour = max(result.max_per_user_hour, _most_within(times, 3_600_000))
    result.max_gated_per_user_hour = max(
        result.max_gated_per_user_hour, _most_within(gated, 3_600_000)
    )
    for (before, _), (at, reminder) in itertools.pairwise(sends):
        if not reminder and at - before < policy.min_spacing_ms:
            result.spacing_violations += 1
    gaps = [(b - a) / MINUTE for a, b in itertools.pairwise(gated)]
    for gap in gaps:
        result.gap_counts[_gap_bucket(gap)] += 1
    if gaps:
        result.min_gaps.append(int(min(gaps)))


VIOLATIONS = (
    "quiet_hour_violations",
    "quota_violations",
    "spacing_violations",
    "duplicates",
    "non_terminal",
)


def render_text(r: dict[str, Any]) -> str:
    i, g = r["intents"], r["min_gap_minutes_per_user"]
    rate = "n/a" if r["engagement_rate"] is None else f"{r['engagement_rate']:.1%}"

    def share(key: str) -> str:
        return "n/a" if r[key] is None else f"{r[key]:.1%}"

    s = r["settings"]
    return "\n".join([
        f"Simulated {r['users']} users over {r['days']} days in {r['zones']} time zones "
        f"(seed {r['seed']}); spacing {s['min_spacing_minutes']:g} min, release window "
        f"{s['release_window_minutes']:g} min, quotas {s['per_user_daily']}/user-day and "
        f"{s['global_daily']}/day",
        f"Intents: {i['registered']} registered — {i['sent']} sent, {i['skipped']} skipped, "
        f"{i['expired']} expired, {i['cancelled']} cancelled, {i['failed']} failed, "
        f"{i['uncertain']} uncertain; {i['deferred']} deferred at least once; "
        f"{i['pending_at_end']} still pending",
        "Triggers: " + ", ".join(f"{k} {v}" for k, v in r["triggers"].items()),
        f"Messages sent: {r['messages_sent']} ({r['gated_sends']} gated, "
        f"{r['reminder_sends']} user-requested reminders); engagement rate {rate}; "
        f"gate tool calls {r['gate_tool_calls']}",
        f"Per user: at most {r['max_sends_per_user_local_day']} gated a local day, "
        f"{r['max_sends_per_user_hour']} in any hour ({r['max_gated_sends_per_user_hour']} "
        f"gated); smallest gap between two gated sends {g['min']} min (p5 {g['p5']} min, "
        f"{g['users']} users)",
        f"Gated sends in the first hour after quiet hours: "
        f"{share('first_hour_after_quiet_share')}; busiest local hour: "
        f"{share('max_local_hour_share')}",
        f"Invariants: quiet-hour violations {r['quiet_hour_violations']}, quota violations "
        f"{r['quota_violations']}, spacing violations {r['spacing_violations']}, duplicates "
        f"{r['duplicates']}, non-terminal {r['non_terminal']}",
    ])  # fmt: skip
