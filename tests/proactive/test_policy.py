"""Policy table tests: quiet hours across zones and DST days, user-local quota days, age,
confidence, opt-out, reminders."""

from __future__ import annotations

from collections import Counter
from zoneinfo import ZoneInfo

import pytest

from proactive.policy import (
    DAY_MS,
    HOUR_MS,
    Action,
    Candidate,
    PolicyConfig,
    QuotaCounts,
    UserPrefs,
    decide,
    in_quiet_hours,
    local_day_start_ms,
    next_allowed_ms,
    next_wall_hour_ms,
    user_prefs,
)
from tests.proactive.support import utc_ms

CFG = PolicyConfig(jitter_max_ms=0)
NONE_USED = QuotaCounts(user_today=0, global_today=0)


def prefs(zone: str, quiet: tuple[int, int] | None = (22, 8), enabled: bool = True) -> UserPrefs:
    return UserPrefs(zone=ZoneInfo(zone), quiet=quiet, enabled=enabled)


def due(now: int, **kw: object) -> Candidate:
    values: dict[str, object] = {"due_at": now, "execute_at": now, "confidence": 0.8}
    values.update(kw)
    return Candidate(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("zone", "utc", "quiet"),
    [
        ("Europe/Berlin", "2026-01-10T20:59:00", False),  # 21:59 CET
        ("Europe/Berlin", "2026-01-10T21:00:00", True),  # 22:00 CET
        ("Europe/Berlin", "2026-07-10T05:59:00", True),  # 07:59 CEST
        ("Europe/Berlin", "2026-07-10T06:00:00", False),  # 08:00 CEST
        ("America/New_York", "2026-03-08T12:30:00", False),  # 08:30 EDT on spring-forward day
        ("America/New_York", "2026-03-08T11:30:00", True),  # 07:30 EDT
        ("America/New_York", "2026-11-01T12:30:00", True),  # 07:30 EST on fall-back day
        ("America/New_York", "2026-11-01T13:00:00", False),  # 08:00 EST
        ("Asia/Kolkata", "2026-01-10T02:29:00", True),  # 07:59 IST (+05:30)
        ("Asia/Kolkata", "2026-01-10T02:30:00", False),
        ("Australia/Lord_Howe", "2026-01-10T10:59:00", False),  # 21:59 (+11 in summer)
        ("Pacific/Chatham", "2026-01-10T08:15:00", True),  # 22:00 (+13:45)
    ],
)
def test_quiet_hours_in_local_time(zone: str, utc: str, quiet: bool) -> None:
    assert in_quiet_hours(utc_ms(utc), ZoneInfo(zone), (22, 8)) is quiet


def test_quiet_window_not_wrapping_midnight_and_off() -> None:
    zone = ZoneInfo("UTC")
    assert in_quiet_hours(utc_ms("2026-01-10T13:00:00"), zone, (12, 14))
    assert not in_quiet_hours(utc_ms("2026-01-10T14:00:00"), zone, (12, 14))
    assert not in_quiet_hours(utc_ms("2026-01-10T23:00:00"), zone, None)
    assert not in_quiet_hours(utc_ms("2026-01-10T23:00:00"), zone, (5, 5))


def test_equal_configured_hours_are_no_quiet_hours_and_say_so() -> None:
    """`quiet_start = quiet_end` in the configuration: off by default, shown as off (not as
    "08:00–08:00"); a user's own hours still apply."""
    cfg = PolicyConfig(quiet_start=8, quiet_end=8)
    assert user_prefs(None, {}, cfg).quiet is None
    assert user_prefs(None, {"quiet_hours": [22, 7]}, cfg).quiet == (22, 7)
    assert user_prefs(None, {}, CFG).quiet == (22, 8)


@pytest.mark.parametrize(
    ("zone", "now", "hour", "expected"),
    [
        # 01:00 EST on spring-forward day -> 08:00 EDT is 12:00 UTC (not 13:00).
        ("America/New_York", "2026-03-08T06:00:00", 8, "2026-03-08T12:00:00"),
        # 01:30 EDT (first pass) on fall-back day -> 08:00 EST is 13:00 UTC: a 25-hour day.
        ("America/New_York", "2026-11-01T05:30:00", 8, "2026-11-01T13:00:00"),
        # The end hour itself falls in the skipped hour (02:00 -> 03:00 EDT).
        ("America/New_York", "2026-03-08T05:00:00", 2, "2026-03-08T07:00:00"),
        # 23:00 CET -> next morning 08:00 CET.
        ("Europe/Berlin", "2026-01-10T22:00:00", 8, "2026-01-11T07:00:00"),
        # Berlin spring-forward night: 08:00 CEST is 06:00 UTC.
        ("Europe/Berlin", "2026-03-28T22:30:00", 8, "2026-03-29T06:00:00"),
    ],
)
def test_window_end_is_dst_safe(zone: str, now: str, hour: int, expected: str) -> None:
    assert next_wall_hour_ms(utc_ms(now), ZoneInfo(zone), hour) == utc_ms(expected)


def test_local_day_start_on_dst_days() -> None:
    ny = ZoneInfo("America/New_York")
    assert local_day_start_ms(utc_ms("2026-03-08T16:00:00"), ny) == utc_ms("2026-03-08T05:00:00")
    assert local_day_start_ms(utc_ms("2026-11-01T16:00:00"), ny) == utc_ms("2026-11-01T04:00:00")
    tokyo = ZoneInfo("Asia/Tokyo")  # 23:30 UTC is already the next day in Tokyo
    assert local_day_start_ms(utc_ms("2026-01-10T23:30:00"), tokyo) == utc_ms("2026-01-10T15:00:00")


def test_quiet_hours_reschedule_to_the_users_place_in_the_release_window() -> None:
    now = utc_ms("2026-01-10T23:00:00")  # 00:00 in Berlin
    # No release window: the window's end exactly (no jitter either).
    verdict = decide(due(now), prefs("Europe/Berlin"), NONE_USED, now, CFG, jitter_ms=7 * 60_000)
    assert verdict.action is Action.RESCHEDULE
    assert verdict.at_ms == utc_ms("2026-01-11T07:00:00")
    # A 120-minute window: one whole minute in it per user and night, the same for every item.
    cfg = PolicyConfig(jitter_max_ms=0, release_window_ms=120 * 60_000)
    spots = set()
    for key in range(200):
        user = user_prefs("Europe/Berlin", {}, cfg, release_key=key)
        at = decide(due(now), user, NONE_USED, now, cfg, jitter_ms=7 * 60_000).at_ms
        again = decide(due(now + 60_000), user, NONE_USED, now + 60_000, cfg).at_ms
        assert at == again
        assert at is not None
        assert utc_ms("2026-01-11T07:00:00") <= at < utc_ms("2026-01-11T09:00:00")
        assert at % 60_000 == 0
        spots.add(at)
    assert len(spots) > 80  # spread over the window, not bunched
    hours = Counter((at - utc_ms("2026-01-11T07:00:00")) // HOUR_MS for at in spots)
    assert min(hours.values()) > 30


def test_spacing_holds_back_a_second_message_and_paces_a_backlog() -> None:
    cfg = PolicyConfig(jitter_max_ms=0, min_spacing_ms=90 * 60_000, per_user_daily=3)
    p = prefs("UTC")
    now = utc_ms("2026-01-10T09:00:00")
    sent = QuotaCounts(user_today=1, global_today=1, last_send_ms=now - 30 * 60_000)
    held = decide(due(now), p, sent, now, cfg)
    assert held.action is Action.RESCHEDULE
    assert held.reason.startswith("spacing")
    # 08:30 to 22:00 shared among the two messages left: the next no sooner than 13:00.
    assert held.at_ms == utc_ms("2026-01-10T13:00:00")
    # Late in the day the spacing itself is the bound (20:00 + 90 min, not + 60).
    late = utc_ms("2026-01-10T20:10:00")
    counts = QuotaCounts(user_today=2, global_today=2, last_send_ms=late - 10 * 60_000)
    assert decide(due(late), p, counts, late, cfg).at_ms == utc_ms("2026-01-10T21:30:00")
    # Past the spacing: it goes; reminders never wait for it.
    done = QuotaCounts(user_today=1, global_today=1, last_send_ms=now - 90 * 60_000)
    assert decide(due(now), p, done, now, cfg).action is Action.PROCEED
    reminder = due(now, is_reminder=True)
    assert decide(reminder, p, sent, now, cfg).action is Action.PROCEED
    # A spacing that ends in quiet hours waits for the release after them.
    night = utc_ms("2026-01-10T21:30:00")
    counts = QuotaCounts(user_today=1, global_today=1, last_send_ms=night - 10 * 60_000)
    assert decide(due(night), p, counts, night, cfg).at_ms == utc_ms("2026-01-11T08:00:00")


@pytest.mark.parametrize(
    ("now", "used", "action", "at"),
    [
        # Tokyo 14:00: 2 of 3 used -> proceed.
        ("2026-01-10T05:00:00", 2, Action.PROCEED, None),
        # 3 used -> the next local day, which starts in quiet hours -> 08:00 JST.
        ("2026-01-10T05:00:00", 3, Action.RESCHEDULE, "2026-01-10T23:00:00"),
        # 20:59 local (11:59 UTC) at the quota -> still tomorrow 08:00 JST, not UTC midnight.
        ("2026-01-10T11:59:00", 3, Action.RESCHEDULE, "2026-01-10T23:00:00"),
    ],
)
def test_user_quota_counts_user_local_days(
    now: str, used: int, action: Action, at: str | None
) -> None:
    ms = utc_ms(now)
    counts = QuotaCounts(user_today=used, global_today=0)
    verdict = decide(due(ms), prefs("Asia/Tokyo"), counts, ms, CFG)
    assert verdict.action is action
    assert verdict.at_ms == (utc_ms(at) if at else None)


def test_quota_without_quiet_hours_waits_for_local_midnight() -> None:
    now = utc_ms("2026-01-10T05:00:00")
    counts = QuotaCounts(user_today=3, global_today=0)
    verdict = decide(due(now), prefs("Asia/Tokyo", quiet=None), counts, now, CFG)
    assert verdict.at_ms == utc_ms("2026-01-10T15:00:00")  # 00:00 JST


def test_global_quota_waits_for_utc_midnight_then_user_morning() -> None:
    now = utc_ms("2026-01-10T15:00:00")
    counts = QuotaCounts(user_today=0, global_today=100)
    verdict = decide(due(now), prefs("America/New_York"), counts, now, CFG)
    assert verdict.action is Action.RESCHEDULE
    assert verdict.at_ms == utc_ms("2026-01-11T00:00:00")  # 19:00 EST: allowed
    berlin = decide(due(now), prefs("Europe/Berlin"), counts, now, CFG)
    assert berlin.at_ms == utc_ms("2026-01-11T07:00:00")  # 01:00 CET is quiet -> 08:00 CET


def test_age_confidence_and_opt_out() -> None:
    now = utc_ms("2026-01-10T12:00:00")
    p = prefs("UTC")
    old = decide(due(now, due_at=now - 7 * DAY_MS - 1), p, NONE_USED, now, CFG)
    assert old.action is Action.EXPIRE
    edge = decide(due(now, due_at=now - 7 * DAY_MS), p, NONE_USED, now, CFG)
    assert edge.action is Action.PROCEED
    assert decide(due(now, confidence=0.49), p, NONE_USED, now, CFG).action is Action.SKIP
    assert decide(due(now, confidence=0.5), p, NONE_USED, now, CFG).action is Action.PROCEED
    off = prefs("UTC", enabled=False)
    assert decide(due(now), off, NONE_USED, now, CFG).action is Action.SKIP
    reminder = due(now, is_reminder=True, exact_time=True)
    assert decide(reminder, off, NONE_USED, now, CFG).action is Action.SKIP


def test_reminders_bypass_quota_and_confidence_but_not_quiet_hours_unless_exact() -> None:
    night = utc_ms("2026-01-10T23:30:00")
    p = prefs("UTC")
    full = QuotaCounts(user_today=99, global_today=999)
    relative = due(night, is_reminder=True, confidence=0.1)
    assert decide(relative, p, full, night, CFG).action is Action.RESCHEDULE
    exact = due(night, is_reminder=True, exact_time=True)
    assert decide(exact, p, full, night, CFG).action is Action.PROCEED
    day = utc_ms("2026-01-10T12:00:00")
    assert decide(due(day, is_reminder=True, confidence=0.1), p, full, day, CFG).action is (
        Action.PROCEED
    )


def test_late_runs_are_marked() -> None:
    now = utc_ms("2026-01-10T12:00:00")
    verdict = decide(due(now, execute_at=now - 2 * HOUR_MS), prefs("UTC"), NONE_USED, now, CFG)
    assert verdict.action is Action.PROCEED
    assert verdict.late_ms == 2 * HOUR_MS
    assert decide(due(now - 60_000), prefs("UTC"), NONE_USED, now, CFG).late_ms == 0


def test_user_prefs_from_settings() -> None:
    cfg = PolicyConfig(default_timezone="Europe/Paris")
    assert user_prefs(None, {}, cfg).zone.key == "Europe/Paris"
    assert user_prefs("Mars/Olympus", {}, cfg).zone.key == "Europe/Paris"
    assert user_prefs("Asia/Tokyo", {"quiet_hours": "off"}, cfg).quiet is None
    assert user_prefs(None, {"quiet_hours": [23, 7]}, cfg).quiet == (23, 7)
    assert user_prefs(None, {"proactive_enabled": False}, cfg).enabled is False


def test_next_allowed_outside_quiet_hours_only_adds_jitter() -> None:
    noon = utc_ms("2026-01-10T12:00:00")
    assert next_allowed_ms(noon, prefs("UTC"), 5) == noon + 5
