"""The production scan loop (`Engine.run`'s slow loop) on the manual clock: scans fire at the
cron times of `scan_timezone`, once each, across both DST changes. The expected instants are
worked out here with zoneinfo, not with the engine's own function."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from proactive.engine import next_scan
from tests.fakes.clock import run_clock_until
from tests.proactive.support import harness, utc_ms
from vault.proactive.scan import ScanResult

NY = ZoneInfo("America/New_York")


def ny(*wall: int, fold: int = 0) -> int:
    """UTC ms of a New York wall time (`fold=1`: the second 01:xx when clocks go back)."""
    at = datetime(*wall, tzinfo=NY).replace(fold=fold)  # type: ignore[misc]
    return int(at.timestamp() * 1000)


async def scans_of(tmp_path: Path, start: str, cron: str, zone: str, count: int) -> list[int]:
    """Run the real engine loops from `start` until `count` scans ran; their instants."""
    # The fast loop polls once a year: the clock jumps from scan to scan.
    async with harness(tmp_path, start=start, scan_cron=cron, scan_timezone=zone,
                       poll_interval_s=365 * 86_400) as h:  # fmt: skip
        engine = h.engine()
        fired: list[int] = []

        async def scan() -> ScanResult:
            fired.append(h.clock.now_ms())
            return ScanResult(0, 0, 0)

        engine.scan = scan  # type: ignore[method-assign]
        running = asyncio.create_task(engine.run())
        await run_clock_until(h.clock, lambda: len(fired) >= count)
        running.cancel()
        await asyncio.wait([running])
        assert running.cancelled()
        return fired[:count]  # the clock may already have moved on to the next one


async def test_a_daily_scan_runs_once_on_the_day_clocks_go_back(tmp_path: Path) -> None:
    fired = await scans_of(tmp_path, "2026-10-30T12:00:00", "30 1 * * *", "America/New_York", 4)
    assert fired == [
        ny(2026, 10, 31, 1, 30),
        ny(2026, 11, 1, 1, 30),  # 01:30 EDT; not again at 01:30 EST an hour later
        ny(2026, 11, 2, 1, 30),
        ny(2026, 11, 3, 1, 30),
    ]
    assert fired[1] == utc_ms("2026-11-01T05:30:00")
    assert fired[2] - fired[1] == 25 * 3_600_000


async def test_a_daily_scan_in_the_skipped_hour_runs_after_the_gap(tmp_path: Path) -> None:
    fired = await scans_of(tmp_path, "2026-03-06T12:00:00", "30 2 * * *", "America/New_York", 3)
    assert fired == [
        ny(2026, 3, 7, 2, 30),
        utc_ms("2026-03-08T07:00:00"),  # 02:30 does not exist: 03:00 EDT, the gap's end
        ny(2026, 3, 9, 2, 30),
    ]


async def test_a_utc_schedule_ignores_the_users_dst(tmp_path: Path) -> None:
    fired = await scans_of(tmp_path, "2026-03-07T20:00:00", "0 */6 * * *", "UTC", 6)
    assert fired == [utc_ms(f"2026-03-{d}T{h}:00:00") for d, h in
                     (("08", "00"), ("08", "06"), ("08", "12"), ("08", "18"), ("09", "00"),
                      ("09", "06"))]  # fmt: skip


async def test_an_hourly_scan_runs_each_wall_hour_once_when_clocks_go_back(
    tmp_path: Path,
) -> None:
    fired = await scans_of(tmp_path, "2026-11-01T03:30:00", "0 * * * *", "America/New_York", 4)
    assert fired == [
        ny(2026, 11, 1, 0, 0),
        ny(2026, 11, 1, 1, 0),
        ny(2026, 11, 1, 2, 0),  # the repeated 01:00 (EST) is the same wall time: skipped
        ny(2026, 11, 1, 3, 0),
    ]
    assert ny(2026, 11, 1, 1, 0, fold=1) not in fired


@pytest.mark.parametrize("zone", ["America/New_York", "Australia/Lord_Howe", "Europe/Berlin"])
def test_next_scan_never_goes_back_in_wall_time(zone: str) -> None:
    """A year of a half-hourly schedule: every wall time at most once, in order."""
    tz = ZoneInfo(zone)
    now, last = utc_ms("2026-01-01T00:00:00"), None
    walls = []
    while now < utc_ms("2027-01-01T00:00:00"):
        now, last = next_scan("*/30 * * * *", tz, now, last)
        walls.append(last)
    assert walls == sorted(set(walls))
    assert len(walls) > 17_000  # 48 a day: only a repeated hour's half-hours are missing
