"""The proactive policy: pure functions deciding what happens to a due item before the model.

One function, `decide`, is applied to every proactive path (intents and every trigger type), so
quiet hours, quotas and spacing can't be forgotten on one of them. Order: too old ->
`expired`; user opted out -> `skipped`; confidence below the threshold -> `skipped` (user
reminders exempt); inside the user's quiet hours -> rescheduled into the release window after
it (reminders for an explicitly requested time exempt); over the per-user quota for the user's
*local* day or the global quota for the UTC day -> rescheduled to the next allowed time; less
than `min_spacing` after the user's last proactive message (any chat, reminders included) ->
rescheduled to the end of the spacing, or later when the user's remaining quota is better
spread over the rest of their day (`paced_ms`). Reminders are exempt from quotas and spacing.

No morning burst: everything of one user held by quiet hours is released at one instant of
the `release_window` after the window ends — the same instant for all of that user's items of
that night (the engine then runs them in priority order, and the spacing holds back all but
the first), spread evenly over users by a keyed hash (`release_ms`), not by a fresh random
draw per item.

Time arithmetic happens in UTC epoch milliseconds; wall-clock times are converted through
`zoneinfo` only at the edges, so DST days (23 or 25 hours, skipped or repeated hours) are
handled by the zone database, not by adding 24 h. The jitter and the release key are chosen by
the caller and passed in, which keeps these functions deterministic.
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
    min_spacing_ms: int = 90 * 60_000
    release_window_ms: int = 120 * 60_000

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
            min_spacing_ms=int(s.min_spacing_minutes * 60_000),
            release_window_ms=int(s.release_window_minutes * 60_000),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UserPrefs:
    zone: ZoneInfo
    enabled: bool = True
    quiet: tuple[int, int] | None = (22, 8)  # None: the user turned quiet hours off
    # Where this user's items held by quiet hours go out in the release window (`release_ms`).
    release_window_ms: int = 0
    release_key: int = 0


def user_prefs(
    timezone: str | None, settings: dict[str, Any], cfg: PolicyConfig, release_key: int = 0
) -> UserPrefs:
    """Per-user settings keys: `proactive_enabled` (bool), `quiet_hours` ([start, end] | "off").
    `release_key` places the user in the release window (any integer; the engine keys it by
    user, so all of one user's items share it)."""
    # Equal hours in the configuration: no quiet hours by default (as `/quiet off`).
    quiet: tuple[int, int] | None = (cfg.quiet_start, cfg.quiet_end)
    if cfg.quiet_start == cfg.quiet_end:
        quiet = None
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
                     quiet=quiet, release_window_ms=cfg.release_window_ms,
                     release_key=release_key)  # fmt: skip


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
    last_send_ms: int | None = None  # the user's latest counted proactive message, any chat


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


def mix64(*values: int) -> int:
    """A well-spread 64-bit hash of integers (splitmix64 steps): the same inputs give the same
    value in every process, unlike `hash()`."""
    x = 0x9E3779B97F4A7C15
    for value in values:
        x = (x ^ (value & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


def release_ms(window_end_ms: int, prefs: UserPrefs) -> int:
    """The instant in the release window after quiet hours when the user's held items go out.

    One instant per (user, night), spread evenly over users: a keyed hash of the two, not a
    random draw per item, so one user's items leave together (and in priority order, the
    spacing holding back all but the first) and a simulation is reproducible. Whole minutes.
    """
    window = prefs.release_window_ms // 60_000
    if window <= 0:
        return window_end_ms
    return window_end_ms + mix64(prefs.release_key, window_end_ms) % window * 60_000


def next_allowed_ms(at_ms: int, prefs: UserPrefs, jitter_ms: int) -> int:
    """`at_ms` plus jitter, or — inside quiet hours — the user's instant in the release window
    after the quiet window ends (`release_ms`, no jitter)."""
    if prefs.quiet is not None and in_quiet_hours(at_ms, prefs.zone, prefs.quiet):
        return release_ms(next_wall_hour_ms(at_ms, prefs.zone, prefs.quiet[1]), prefs)
    return at_ms + jitter_ms


SPACING_REASON = "spacing: the last proactive message to this user was too recent"


def spacing_free_ms(last_send_ms: int | None, cfg: PolicyConfig) -> int:
    """When the next non-reminder message may go to a user whose last one went at `last`."""
    if last_send_ms is None or cfg.min_spacing_ms <= 0:
        return 0
    return last_send_ms + cfg.min_spacing_ms


def paced_ms(last_send_ms: int, left: int, prefs: UserPrefs, cfg: PolicyConfig) -> int:
    """When an item held back by the spacing runs again: the spacing's end, or — if later —
    the rest of the user's day (until their quiet hours, or midnight) shared evenly among the
    messages their quota still allows, so a backlog does not spend a day's quota in the morning
    at `min_spacing` intervals."""
    free = last_send_ms + cfg.min_spacing_ms
    if left <= 0:
        return free
    if prefs.quiet is not None:
        day_end = next_wall_hour_ms(last_send_ms, prefs.zone, prefs.quiet[0])
    else:
        day_end = next_local_day_start_ms(last_send_ms, prefs.zone)
    return max(free, last_send_ms + (day_end - last_send_ms) // (left + 1))


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
        free = spacing_free_ms(quota.last_send_ms, cfg)
        if now_ms < free:
            assert quota.last_send_ms is not None
            left = cfg.per_user_daily - quota.user_today
            # No jitter: the time is already a per-user one, not a shared one.
            at = next_allowed_ms(paced_ms(quota.last_send_ms, left, prefs, cfg), prefs, 0)
            return Verdict(Action.RESCHEDULE, SPACING_REASON, at)
    late = max(0, now_ms - item.execute_at)
    return Verdict(Action.PROCEED, "due", late_ms=late if late > LATE_AFTER_MS else 0)
