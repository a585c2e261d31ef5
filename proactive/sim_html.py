"""The simulator's report as one self-contained HTML page (inline SVG, no external assets).

Every chart has labelled axes with tick values, the value of each bar or point, a legend, and
a caption stating its time basis — a recipient's local
time, UTC days of the run, or none — because "08:00" means nothing without it. Gated
follow-ups and the reminders users asked for (exempt from the gate, quotas and spacing) are
drawn apart. Above the charts: the invariants counted from the raw send log, and how messages
bunch per user, each figure under its JSON key.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from proactive.sim_report import INTENT_OUTCOMES, VIOLATIONS, render_text

GATED, REMINDER, NEUTRAL, LINE = "#3b6fc4", "#e08a2c", "#7d8a99", "#2f8f5b"
CHECK_IN = "#8e6bbf"
SEGMENT_LABEL_MIN_PX = 13  # a stacked segment this tall carries its own value
WIDTH, HEIGHT = 1040, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 36, 58


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: list[float]
    color: str


def _nice_top(value: float) -> float:
    """A round axis maximum at or above `value`."""
    if value <= 0:
        return 1.0
    step = 10 ** (len(str(int(value))) - 1)
    for factor in (1, 2, 2.5, 5, 10):
        if value <= factor * step:
            return float(factor * step)
    return float(10 * step)


def _fmt(value: float, percent: bool) -> str:
    return f"{value:.0%}" if percent else f"{value:,.0f}"


def _frame(title: str, x_title: str, y_title: str, legend: list[Series]) -> list[str]:
    parts = [
        f"<figure><h2>{html.escape(title)}</h2>",
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(title)}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{LEFT + (WIDTH - LEFT - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle" '
        f'font-size="12">{html.escape(x_title)}</text>',
        f'<text transform="translate(14 {TOP + (HEIGHT - TOP - BOTTOM) / 2}) rotate(-90)" '
        f'text-anchor="middle" font-size="12">{html.escape(y_title)}</text>',
    ]
    x = WIDTH - RIGHT
    for series in reversed(legend):  # the legend, right-aligned above the plot
        x -= 14 + 7 * len(series.name) + 18
        parts.append(
            f'<rect x="{x}" y="8" width="12" height="12" fill="{series.color}"/>'
            f'<text x="{x + 16}" y="18">{html.escape(series.name)}</text>'
        )
    return parts


def _y_axis(top: float, percent: bool) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    parts = []
    for n in range(5):
        value = top * n / 4
        y = TOP + plot_h - plot_h * n / 4
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_fmt(value, percent)}</text>"
        )
    parts.append(
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#333"/>'
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" '
        'stroke="#333"/>'
    )
    return parts


def bar_chart(
    title: str, caption: str, labels: list[str], series: list[Series], *, x_title: str,
    y_title: str, shade: set[int] | None = None, shade_note: str = "",
    guide: tuple[float, str] | None = None,
) -> str:  # fmt: skip
    """Stacked bars, one stack per label, its total written above it and, in a stack of
    several series, each segment's value inside it where it is tall enough."""
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    top = _nice_top(max([*totals, guide[0] if guide else 0], default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(labels), 1)
    parts = _frame(title, x_title, y_title, series)
    for i in shade or ():
        parts.append(
            f'<rect x="{LEFT + i * slot:.1f}" y="{TOP}" width="{slot:.1f}" height="{plot_h}" '
            'fill="#f1f1f6"/>'
        )
    parts += _y_axis(top, False)
    every = max(1, len(labels) // 31 + 1)
    for i, label in enumerate(labels):
        x, base = LEFT + i * slot + slot * 0.12, float(TOP + plot_h)
        for s in series:
            h = plot_h * s.values[i] / top
            if h > 0:
                base -= h
                parts.append(
                    f'<rect x="{x:.1f}" y="{base:.1f}" width="{slot * 0.76:.1f}" '
                    f'height="{h:.1f}" fill="{s.color}"><title>{html.escape(label)}, '
                    f"{html.escape(s.name)}: {s.values[i]:,.0f}</title></rect>"
                )
                if len(series) > 1 and h >= SEGMENT_LABEL_MIN_PX and s.values[i] != totals[i]:
                    parts.append(
                        f'<text x="{LEFT + i * slot + slot / 2:.1f}" y="{base + h / 2 + 3:.1f}" '
                        f'text-anchor="middle" font-size="9" fill="#fff">{s.values[i]:,.0f}</text>'
                    )
        cx = LEFT + i * slot + slot / 2
        if totals[i]:
            parts.append(
                f'<text x="{cx:.1f}" y="{base - 3:.1f}" text-anchor="middle" font-size="9">'
                f"{totals[i]:,.0f}</text>"
            )
        if i % every == 0:
            parts.append(
                f'<text x="{cx:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                f"{html.escape(label)}</text>"
            )
    if guide is not None:
        y = TOP + plot_h - plot_h * guide[0] / top
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#c0392b" '
            f'stroke-dasharray="5 4"/><text x="{WIDTH - RIGHT - 4}" y="{y - 4:.1f}" '
            f'text-anchor="end" fill="#c0392b">{html.escape(guide[1])}</text>'
        )
    parts.append("</svg>")
    note = f" {shade_note}" if shade_note else ""
    parts.append(f"<figcaption>{html.escape(caption + note)}</figcaption></figure>")
    return "".join(parts)


def line_chart(
    title: str, caption: str, labels: list[str], values: list[float | None], counts: list[int],
    *, x_title: str, y_title: str,
) -> str:  # fmt: skip
    """A share (0..1) per label as a line with its points labelled, the count it is of below."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(labels), 1)
    legend = [Series("engaged share", [], LINE), Series("messages (n, below)", [], NEUTRAL)]
    parts = _frame(title, x_title, y_title, legend)
    parts += _y_axis(1.0, True)
    points = []
    every = max(1, len(labels) // 31 + 1)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        cx = LEFT + i * slot + slot / 2
        if i % every == 0:
            parts.append(
                f'<text x="{cx:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                f'{html.escape(label)}</text><text x="{cx:.1f}" y="{TOP + plot_h + 26}" '
                f'text-anchor="middle" fill="{NEUTRAL}" font-size="9">{counts[i]}</text>'
            )
        if value is None:
            continue
        y = TOP + plot_h - plot_h * value
        points.append(f"{cx:.1f},{y:.1f}")
        parts.append(
            f'<circle cx="{cx:.1f}" cy="{y:.1f}" r="3" fill="{LINE}"><title>'
            f"{html.escape(label)}: {value:.1%} of {counts[i]}</title></circle>"
            f'<text x="{cx:.1f}" y="{y - 7:.1f}" text-anchor="middle" font-size="9">'
            f"{value:.0%}</text>"
        )
    if points:
        parts.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{LINE}" stroke-width="2"/>'
        )
    parts.append(f"</svg><figcaption>{html.escape(caption)}</figcaption></figure>")
    return "".join(parts)


def _days(r: dict[str, Any]) -> list[str]:
    start = datetime.fromisoformat(r.get("start", "2026-03-06T00:00:00+00:00")).astimezone(UTC)
    return [f"{start + timedelta(days=d):%m-%d}" for d in range(r["days"])]


def _summary(r: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(k.replace('_', ' '))}</td><td>{r[k]}</td>"
        f"<td>{'ok' if r[k] == 0 else 'VIOLATED'}</td></tr>"
        for k in VIOLATIONS
    )
    return (
        "<h2>Invariants (checked from the raw send log)</h2><table><tr><th>check</th>"
        f"<th>count</th><th></th></tr>{rows}</table>{_bunching(r)}"
    )


def _bunching(r: dict[str, Any]) -> str:
    """How sends bunch per user, each figure under its JSON key."""

    def share(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    def minutes(value: int | None) -> str:
        return "n/a" if value is None else f"{value} min"

    gap = r["min_gap_minutes_per_user"]
    spacing = r["settings"]["min_spacing_minutes"]
    rows = [
        ("max_sends_per_user_hour", "most messages to one user in any 60 minutes",
         f"{r['max_sends_per_user_hour']} ({r['max_gated_sends_per_user_hour']} gated; "
         "reminders keep the time the user asked for)"),
        ("min_gap_minutes_per_user", "smallest gap between two gated messages to one user",
         f"minimum {minutes(gap['min'])}, 5th percentile {minutes(gap['p5'])} over "
         f"{gap['users']} users (spacing {spacing:g} min)"),
        ("first_hour_after_quiet_share", "gated messages in the first hour after quiet hours",
         share(r["first_hour_after_quiet_share"])),
        ("max_local_hour_share", "gated messages in the busiest local hour",
         share(r["max_local_hour_share"])),
        ("max_sends_per_user_local_day", "most gated messages to one user in a local day",
         f"{r['max_sends_per_user_local_day']} (quota {r['settings']['per_user_daily']})"),
    ]  # fmt: skip
    body = "".join(
        f"<tr><td><code>{key}</code></td><td>{html.escape(what)}</td>"
        f"<td>{html.escape(value)}</td></tr>"
        for key, what, value in rows
    )
    return (
        "<h2>How messages bunch per user</h2><table><tr><th>JSON key</th><th>figure</th>"
        f"<th>value</th></tr>{body}</table>"
    )


def render_html(r: dict[str, Any]) -> str:
    hours = r["sends_per_local_hour"]
    quiet_start, quiet_end = r["settings"]["quiet_hours"]
    quiet = {h for h in range(24) if (h >= quiet_start or h < quiet_end)} if (
        quiet_start > quiet_end
    ) else set(range(quiet_start, quiet_end))  # fmt: skip
    gated_total = max(1, r["gated_sends"])
    per_day, engaged = r["sends_per_day"], r["engagement_per_day"]
    states = [*INTENT_OUTCOMES, "pending_at_end"]
    intents = [r["intents"].get(k, 0) for k in states]
    triggers = r.get("trigger_outcomes", {})
    check_ins = [triggers.get("pending" if k == "pending_at_end" else k, 0) for k in states]
    gaps = r["gated_gap_minutes"]
    spacing = r["settings"]["min_spacing_minutes"]
    charts = [
        bar_chart(
            "Proactive messages per local hour",
            "Time basis: each message at its recipient's local time (their IANA zone at the "
            "moment of sending, DST included). The dashed line is 15% of all gated messages: "
            "the blue part of every bar must stay below it. Inside a bar: the number of each kind.",
            [f"{h:02d}" for h in range(24)],
            [Series("gated follow-ups and check-ins", hours["gated"], GATED),
             Series("reminders users asked for (exempt)", hours["reminders"], REMINDER)],
            x_title="hour of day, recipient's local time", y_title="messages",
            shade=quiet, shade_note=(
                f"Shaded: default quiet hours {quiet_start:02d}:00–{quiet_end:02d}:00 "
                "(exact-time reminders may fall there)." if quiet else "No default quiet hours."
            ),
            guide=(0.15 * gated_total, "15% of gated"),
        ),
        bar_chart(
            "Proactive messages per day",
            "Time basis: UTC calendar days of the run (day 1 starts 2026-03-06 00:00 UTC).",
            _days(r),
            [Series("gated follow-ups and check-ins", per_day["gated"], GATED),
             Series("reminders users asked for (exempt)", per_day["reminders"], REMINDER)],
            x_title="day (UTC, month-day)", y_title="messages",
        ),
        line_chart(
            "Engagement over time",
            "Time basis: UTC day the message was sent. Engaged: the user wrote in the chat the "
            "message went to within 24 h of it. The last day's messages had less than 24 h.",
            _days(r),
            [e / n if n else None for e, n in zip(engaged["engaged"], engaged["sent"],
                                                  strict=True)],
            engaged["sent"],
            x_title="day (UTC, month-day); messages delivered that day below",
            y_title="share engaged",
        ),
        bar_chart(
            "Gap between two gated messages to one user",
            f"No time-zone basis (durations). Configured spacing: {spacing:g} min; "
            "the first bucket must stay empty.",
            list(gaps),
            [Series("consecutive gated pairs", list(gaps.values()), GATED)],
            x_title="time since the user's previous gated message", y_title="pairs",
        ),
        bar_chart(
            "Outcomes of follow-ups, reminders and check-ins",
            "No time basis: the state of every registered follow-up and reminder, and of every "
            "check-in the scan found, at the end of the run (pending: not yet due or held back "
            "when the run ended).",
            [k.replace("_", " ") for k in states],
            [Series("follow-ups and reminders", intents, NEUTRAL),
             Series("check-ins from the scan", check_ins, CHECK_IN)],
            x_title="state at the end of the run", y_title="items",
        ),
    ]  # fmt: skip
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}"
        "figure{margin:1.5em 0}figcaption{color:#555;font-size:13px;max-width:1040px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 10px}"
        "pre{background:#f6f6f6;padding:1em;white-space:pre-wrap}"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Iris proactive simulation"
        f"</title><style>{style}</style></head><body><h1>Iris proactive simulation</h1>"
        f"<pre>{html.escape(render_text(r))}</pre>{_summary(r)}{''.join(charts)}</body></html>"
    )
