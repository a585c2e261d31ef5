"""Budget windows follow the user's clock: DST days of 23 and 25 hours, month ends, zones
ahead of UTC."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from gateway.limits.windows import day_window, month_window, utc_day_window, when_local
from tests.gateway.limits.support import local_ms

HOUR = 3_600_000
NEW_YORK = ZoneInfo("America/New_York")


def test_spring_forward_day_has_23_hours() -> None:
    day = day_window(local_ms("2026-03-08T12:00", "America/New_York"), NEW_YORK)
    assert day.label == "2026-03-08"
    assert day.end_ms - day.start_ms == 23 * HOUR
    assert day.end_ms == local_ms("2026-03-09T00:00", "America/New_York")


def test_fall_back_day_has_25_hours() -> None:
    day = day_window(local_ms("2026-11-01T23:30", "America/New_York"), NEW_YORK)
    assert day.label == "2026-11-01"
    assert day.end_ms - day.start_ms == 25 * HOUR


def test_a_day_whose_midnight_is_skipped_starts_when_the_clocks_jump() -> None:
    havana = ZoneInfo("America/Havana")  # DST starts at 00:00 -> 01:00
    day = day_window(local_ms("2026-03-08T12:00", "America/Havana"), havana)
    assert day.label == "2026-03-08"
    assert day.end_ms - day.start_ms == 23 * HOUR
    assert when_local(day.start_ms, havana).startswith("01:00 on Sun 8 Mar")


def test_month_end_in_a_zone_ahead_of_utc() -> None:
    auckland = ZoneInfo("Pacific/Auckland")  # UTC+13 in January
    last_minute = local_ms("2026-01-31T23:59", "Pacific/Auckland")
    month = month_window(last_minute, auckland)
    assert month.label == "2026-01"
    assert month.end_ms == local_ms("2026-02-01T00:00", "Pacific/Auckland")
    assert month_window(month.end_ms, auckland).label == "2026-02"
    # ... which is still January 31st in UTC.
    assert utc_day_window(month.end_ms).label == "2026-01-31"


def test_december_rolls_into_the_next_year() -> None:
    month = month_window(local_ms("2026-12-31T18:00", "UTC"), ZoneInfo("UTC"))
    assert (month.label, month.end_ms) == ("2026-12", local_ms("2027-01-01T00:00", "UTC"))


def test_reset_times_read_in_the_users_zone() -> None:
    at = local_ms("2026-03-09T00:00", "America/New_York")
    assert when_local(at, NEW_YORK) == "00:00 on Mon 9 Mar (America/New_York)"
