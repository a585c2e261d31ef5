"""The simulator's independent check on hand-made send logs: it counts what the policy must
prevent (so it can disagree with the policy), and its figures add up."""

from __future__ import annotations

from proactive.policy import PolicyConfig
from proactive.sim_html import render_html
from proactive.sim_report import Send, percentile, tally
from tests.proactive.support import utc_ms
from vault.proactive.report import ReportItem

POLICY = PolicyConfig(min_spacing_ms=90 * 60_000, per_user_daily=3, global_daily=5)
START = utc_ms("2026-03-06T00:00:00")


def item(n: int, user: int = 1, zone: str = "Europe/Berlin", kind: str = "ai",
         exact: bool = False, settings: dict[str, object] | None = None) -> ReportItem:  # fmt: skip
    return ReportItem(source="intent", id=n, user_pk=user, kind=kind, exact_time=exact,
                      timezone=zone, settings=settings or {})  # fmt: skip


def check(sends: list[tuple[str, ReportItem]]) -> dict[str, int]:
    items = {f"proactive:intent:{i.id}": i for _, i in sends}
    log = [Send(utc_ms(at), f"proactive:intent:{i.id}") for at, i in sends]
    t = tally(log, items, POLICY, START, 3)
    return {"quiet": t.quiet_violations, "quota": t.quota_violations,
            "spacing": t.spacing_violations, "hour": t.max_per_user_hour}  # fmt: skip


def test_a_clean_log_has_no_violations() -> None:
    sends = [("2026-03-06T08:00:00", item(1)), ("2026-03-06T12:00:00", item(2)),
             ("2026-03-06T16:00:00", item(3)), ("2026-03-07T08:00:00", item(4))]  # fmt: skip
    assert check(sends) == {"quiet": 0, "quota": 0, "spacing": 0, "hour": 1}


def test_quiet_hours_are_read_in_the_users_own_zone_and_dst() -> None:
    # 21:30 UTC is 22:30 in Berlin (quiet) but 16:30 in New York (not).
    assert check([("2026-03-06T21:30:00", item(1))])["quiet"] == 1
    assert check([("2026-03-06T21:30:00", item(1, zone="America/New_York"))])["quiet"] == 0
    # 11:30 UTC on 2026-03-08: 07:30 EDT (quiet) after the spring change, 06:30 EST the day
    # before — a check that ignored DST would see 06:30 on both days.
    assert check([("2026-03-08T11:30:00", item(1, zone="America/New_York"))])["quiet"] == 1
    assert check([("2026-03-08T12:30:00", item(1, zone="America/New_York"))])["quiet"] == 0
    # Exact-time reminders may fall in quiet hours; relative ones may not.
    night = "2026-03-06T22:30:00"
    assert check([(night, item(1, kind="user_reminder", exact=True))])["quiet"] == 0
    assert check([(night, item(1, kind="user_reminder"))])["quiet"] == 1
    # A user's own quiet hours (or none) win over the default.
    assert check([(night, item(1, settings={"quiet_hours": "off"}))])["quiet"] == 0
    assert (
        check([("2026-03-06T12:00:00", item(1, settings={"quiet_hours": [12, 14]}))])["quiet"] == 1
    )


def test_quotas_count_user_local_days_and_utc_days() -> None:
    # Four gated sends on one Tokyo day (UTC 23:00 is already the next day there).
    tokyo = [(f"2026-03-06T{h}:00:00", item(n, zone="Asia/Tokyo")) for n, h in
             enumerate(("00", "03", "06", "09"), 1)]  # fmt: skip
    assert check(tokyo)["quota"] == 1
    split = [*tokyo[:3], ("2026-03-06T23:00:00", item(9, zone="Asia/Tokyo"))]
    assert check(split)["quota"] == 0
    # Reminders do not count; six users' gated sends in one UTC day exceed the global 5.
    reminders = [*tokyo[:3], ("2026-03-06T09:00:00", item(9, zone="Asia/Tokyo",
                                                             kind="user_reminder"))]  # fmt: skip
    assert check(reminders)["quota"] == 0
    crowd = [("2026-03-06T12:00:00", item(n, user=n)) for n in range(1, 7)]
    assert check(crowd)["quota"] == 1


def test_spacing_counts_any_previous_message_but_never_holds_a_reminder() -> None:
    close = [("2026-03-06T09:00:00", item(1)), ("2026-03-06T10:29:00", item(2))]
    assert check(close)["spacing"] == 1
    apart = [("2026-03-06T09:00:00", item(1)), ("2026-03-06T10:30:00", item(2))]
    assert check(apart)["spacing"] == 0
    after_reminder = [("2026-03-06T09:00:00", item(1, kind="user_reminder")),
                      ("2026-03-06T09:10:00", item(2))]  # fmt: skip
    assert check(after_reminder)["spacing"] == 1
    reminder_after = [("2026-03-06T09:00:00", item(1)),
                      ("2026-03-06T09:10:00", item(2, kind="user_reminder"))]  # fmt: skip
    assert check(reminder_after) == {"quiet": 0, "quota": 0, "spacing": 0, "hour": 2}
    other_users = [("2026-03-06T09:00:00", item(1, user=1)), ("2026-03-06T09:00:00",
                                                               item(2, user=2))]  # fmt: skip
    assert check(other_users)["spacing"] == 0


def test_percentile_and_the_html_of_an_empty_run() -> None:
    assert percentile([], 0.05) is None
    assert percentile([90, 100, 200], 0.05) == 90
    assert percentile(list(range(1, 101)), 0.05) == 5
    report = {
        "users": 1, "days": 2, "seed": 1, "zones": 1, "start": "2026-03-06T00:00:00+00:00",
        "settings": {"quiet_hours": [22, 8], "per_user_daily": 3, "global_daily": 3,
                     "min_spacing_minutes": 90.0, "release_window_minutes": 120.0},
        "intents": {"registered": 0, "sent": 0, "skipped": 0, "expired": 0, "cancelled": 0,
                    "failed": 0, "uncertain": 0, "deferred": 0, "pending_at_end": 0},
        "triggers": {}, "gate_tool_calls": 0, "messages_sent": 0, "gated_sends": 0,
        "reminder_sends": 0, "quiet_hour_violations": 0, "quota_violations": 0,
        "spacing_violations": 0, "duplicates": 0, "non_terminal": 0,
        "max_sends_per_user_local_day": 0, "max_sends_per_user_hour": 0,
        "max_gated_sends_per_user_hour": 0,
        "min_gap_minutes_per_user": {"min": None, "p5": None, "users": 0},
        "gated_gap_minutes": {"< 90 min": 0}, "first_hour_after_quiet_share": None,
        "max_local_hour_share": None, "engagement_rate": None,
        "engagement_per_day": {"sent": [0, 0], "engaged": [0, 0]},
        "sends_per_local_hour": {"gated": [0] * 24, "reminders": [0] * 24},
        "sends_per_day": {"gated": [0, 0], "reminders": [0, 0]},
    }  # fmt: skip
    page = render_html(report)
    assert page.count("<svg") == 5
    assert "n/a" in page
    for key in ("max_sends_per_user_hour", "min_gap_minutes_per_user",
                "first_hour_after_quiet_share", "max_local_hour_share"):  # fmt: skip
        assert f"<code>{key}</code>" in page, key
