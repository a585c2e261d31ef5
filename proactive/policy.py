"""The proactive policy: pure functions deciding what happens to a due item before the model.

One function, `decide`, is applied to every proactive path (intents and every trigger type), so
quiet hours and quotas can't be forgotten on one of them. Order: too old -> `expired`; user
opted out -> `skipped`; confidence below the threshold -> `skipped` (user reminders exempt);
inside the user's quiet hours -> rescheduled to the window's end plus jitter (reminders for an
explicitly requested time exempt); over the per-user quota for the user's *local* day or the
global quota for the UTC day -> rescheduled to the next allowed time (reminders exempt).

Time arithmetic happens in UTC epoch milliseconds; wall-clock times are converted through
`zoneinfo` only at the edges, so DST days (23 or 25 hours, skipped or repeated hours) are
handled by the zone database, not by adding 24 h. The jitter is drawn by the caller and passed
in, which keeps these functions deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
LATE_AFTER_MS = 15 * 60_000  # a run this far past its time is recorded as late


class Action(StrEnum):
    PROCEED = "proceed"
    SKIP = "skip"
    EXPIRE = "expire"
    RESCHEDULE = "reschedule"


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    reason: str
    at_ms: int | None = None
    late_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyConfig:
    quiet_start: int = 22
    quiet_end: int = 8
    per_user_daily: int = 3
    global_daily: int = 100
    confidence_threshold: float = 0.5
    max_age_ms: int = 7 * DAY_MS
    jitter_max_ms: int = 30 * 60_000
    default_timezone: str = "UTC"

    @classmethod
    def from_section(cls, s: Any) -> PolicyConfig:
        return cls(
            quiet_start=s.quiet_start,
            quiet_end=s.quiet_end,
            per_user_daily=s.per_user_daily,
            global_daily=s.global_daily,
            confidence_threshold=s.confidence_threshold,
            max_age_ms=int(s.max_age_days * DAY_MS),
            jitter_max_ms=int(s.jitter_max_minutes * 60_000),
            default_timezone=s.default_timezone,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UserPrefs:
    zone: ZoneInfo
    enabled: bool = True
    quiet: tuple[int, int] | None = (22, 8)  # None: the user turned quiet hours off


def user_prefs(timezone: str | None, settings: dict[str, Any], cfg: PolicyConfig) -> UserPrefs:
    """Per-user settings keys: `proactive_enabled` (bool), `quiet_hours` ([start, end] | "off")."""
    quiet: tuple[int, int] | None = (cfg.quiet_start, cfg.quiet_end)
    override = settings.get("quiet_hours")
    if override == "off":
        quiet = None
    elif isinstance(override, list) and len(override) == 2:
        quiet = (int(override[0]), int(override[1]))
    try:
        zone = ZoneInfo(timezone or cfg.default_timezone)
    except (ValueError, KeyError):  # a zone removed from tzdata since the user set it
        zone = ZoneInfo(cfg.default_timezone)
    return UserPrefs(zone=zone, enabled=settings.get("proactive_enabled", True) is not False,
                     quiet=quiet)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """What the policy needs to know about an item."""

    due_at: int
    execute_at: int
    confidence: float
    is_reminder: bool = False
    exact_time: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaCounts:
    user_today: int
    global_today: int


def local(ms: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone)


def _wall_to_ms(day: datetime, hour: int, zone: ZoneInfo) -> int:
    """UTC ms of `hour`:00 on `day`'s local date; a skipped hour maps to just after the gap."""
    wall = datetime.combine(day.date(), time(hour), tzinfo=zone)
    return int(wall.astimezone(UTC).timestamp() * 1000)


# The local day last asked for, per zone: [start, next start) in UTC ms. Every message and
# every proactive item asks for its user's day; a day's bounds, once known, hold for all of it.
_DAYS: dict[ZoneInfo, tuple[int, int]] = {}


def _local_day(now_ms: int, zone: ZoneInfo) -> tuple[int, int]:
    known = _DAYS.get(zone)
    if known is not None and known[0] <= now_ms < known[1]:
        return known
    today = local(now_ms, zone)
    day = _wall_to_ms(today, 0, zone), _wall_to_ms(today + timedelta(days=1), 0, zone)
    _DAYS[zone] = day
    return day


def local_day_start_ms(now_ms: int, zone: ZoneInfo) -> int:
    return _local_day(now_ms, zone)[0]


def next_local_day_start_ms(now_ms: int, zone: ZoneInfo) -> int:
    return _local_day(now_ms, zone)[1]


def utc_day_start_ms(now_ms: int) -> int:
    return now_ms - now_ms % DAY_MS


def in_quiet_hours(now_ms: int, zone: ZoneInfo, quiet: tuple[int, int] | None) -> bool:
    if quiet is None or quiet[0] == quiet[1]:
        return False
    start, end = quiet
    hour = local(now_ms, zone).hour
    return start <= hour < end if start < end else hour >= start or hour < end


def next_wall_hour_ms(now_ms: int, zone: ZoneInfo, hour: int) -> int:
    """The first instant after `now_ms` when the local clock shows `hour`:00."""
    today = local(now_ms, zone)
    for days in (0, 1, 2):
        at = _wall_to_ms(today + timedelta(days=days), hour, zone)
        if at > now_ms:
            return at
    raise AssertionError("unreachable: a wall hour recurs within two days")


def next_allowed_ms(at_ms: int, prefs: UserPrefs, jitter_ms: int) -> int:
    """`at_ms` plus jitter, or — inside quiet hours — the window's end plus jitter."""
    if prefs.quiet is not None and in_quiet_hours(at_ms, prefs.zone, prefs.quiet):
        return next_wall_hour_ms(at_ms, prefs.zone, prefs.quiet[1]) + jitter_ms
    return at_ms + jitter_ms


def decide(
    item: Candidate,
    prefs: UserPrefs,
    quota: QuotaCounts,
    now_ms: int,
    cfg: PolicyConfig,
    jitter_ms: int = 0,
) -> Verdict:
    age = now_ms - item.due_at
    if age > cfg.max_age_ms:
        return Verdict(Action.EXPIRE, f"expired: {age // HOUR_MS} h past due")
    if not prefs.enabled:
        return Verdict(Action.SKIP, "the user turned proactive messages off")
    if not item.is_reminder and item.confidence < cfg.confidence_threshold:
        return Verdict(
            Action.SKIP,
            f"confidence {item.confidence:.2f} below threshold {cfg.confidence_threshold:.2f}",
        )
    exempt_quiet = item.is_reminder and item.exact_time
    if not exempt_quiet and in_quiet_hours(now_ms, prefs.zone, prefs.quiet):
        at = next_allowed_ms(now_ms, prefs, jitter_ms)
        return Verdict(Action.RESCHEDULE, "quiet hours in the user's time zone", at)
    if not item.is_reminder:
        if quota.user_today >= cfg.per_user_daily:
            at = next_allowed_ms(next_local_day_start_ms(now_ms, prefs.zone), prefs, jitter_ms)
            return Verdict(Action.RESCHEDULE, "per-user daily quota reached (user-local day)", at)
        if quota.global_today >= cfg.global_daily:
            at = next_allowed_ms(utc_day_start_ms(now_ms) + DAY_MS, prefs, jitter_ms)
            return Verdict(Action.RESCHEDULE, "global daily quota reached", at)
    late = max(0, now_ms - item.execute_at)
    return Verdict(Action.PROCEED, "due", late_ms=late if late > LATE_AFTER_MS else 0)
