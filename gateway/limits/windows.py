"""The periods budgets count in: the user's local day and month, and the UTC day.

A window is a label (`2026-03-08`, `2026-03`) and its bounds in UTC epoch milliseconds. Bounds
come from the zone database, never from adding 24 hours: a local day across a DST change lasts
23 or 25 hours, and in a zone whose clocks skip midnight the day starts when the clocks jump.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

UTC_ZONE = ZoneInfo("UTC")


@dataclass(frozen=True, slots=True)
class Window:
    label: str
    start_ms: int
    end_ms: int  # exclusive: when the budget resets


def zone_of(name: str | None, default: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or default)
    except (ValueError, KeyError):  # a zone removed from tzdata since the user set it
        return ZoneInfo(default)


def _midnight_ms(day: date, zone: ZoneInfo) -> int:
    """The first instant of `day` in `zone` (just after the gap if midnight is skipped)."""
    return int(datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC).timestamp() * 1000)


def local_date(now_ms: int, zone: ZoneInfo) -> date:
    return datetime.fromtimestamp(now_ms / 1000, UTC).astimezone(zone).date()


def day_window(now_ms: int, zone: ZoneInfo) -> Window:
    today = local_date(now_ms, zone)
    tomorrow = today + timedelta(days=1)
    return Window(today.isoformat(), _midnight_ms(today, zone), _midnight_ms(tomorrow, zone))


def month_window(now_ms: int, zone: ZoneInfo) -> Window:
    today = local_date(now_ms, zone)
    first = today.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return Window(f"{first:%Y-%m}", _midnight_ms(first, zone), _midnight_ms(following, zone))


def utc_day_window(now_ms: int) -> Window:
    return day_window(now_ms, UTC_ZONE)


def when_local(ms: int, zone: ZoneInfo) -> str:
    """`00:00 on Mon 9 Mar (Europe/Berlin)`: a reset time as the user reads it."""
    moment = datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone)
    return f"{moment:%H:%M} on {moment:%a} {moment.day} {moment:%b} ({zone.key})"


def iso_local(ms: int, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone).isoformat()
