"""The simulator's report: invariants checked from what the channel actually received.

Violations are computed independently of the engine's own bookkeeping: every message the
channel saw is mapped back to its item and checked against the user's quiet hours (in the
user's zone at that instant) and the quotas (per user-local day; global per UTC day). Also
counted: duplicate sends (one idempotency key seen twice) and items left claimed but never
finished. `render_text` and `render_html` (inline SVG, no external assets) present it.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from proactive.policy import DAY_MS, PolicyConfig, in_quiet_hours, local, user_prefs
from vault.db import Vault
from vault.proactive.log import ProactiveLog
from vault.proactive.report import ProactiveReport, ReportItem
from vault.proactive.store import TERMINAL, TRIGGER_TYPES

INTENT_OUTCOMES = tuple(status.value for status in TERMINAL)


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


async def _items(report: ProactiveReport) -> dict[str, ReportItem]:
    """Every item by the idempotency key its send carries (as the engine builds it)."""
    return {f"proactive:{i.source}:{i.id}": i for i in await report.items()}


@dataclass
class Tally:
    """What the channel received, checked against quiet hours and quotas independently."""

    quiet_violations: int = 0
    quota_violations: int = 0
    max_per_user_day: int = 0
    per_hour: list[int] = field(default_factory=lambda: [0] * 24)
    per_day: list[int] = field(default_factory=list)


def tally(
    sends: list[Send], items: dict[str, ReportItem], policy: PolicyConfig, start_ms: int,
    days: int,
) -> Tally:  # fmt: skip
    result = Tally(per_day=[0] * days)
    per_user_day: Counter[tuple[int, str]] = Counter()
    per_utc_day: Counter[int] = Counter()
    for send in sends:
        item = items[send.key]
        prefs = user_prefs(item.timezone, item.settings, policy)
        exempt = item.kind == "user_reminder" and item.exact_time
        if not exempt and in_quiet_hours(send.at_ms, prefs.zone, prefs.quiet):
            result.quiet_violations += 1
        at = local(send.at_ms, prefs.zone)
        result.per_hour[at.hour] += 1
        index = (send.at_ms - start_ms) // DAY_MS
        if 0 <= index < days:
            result.per_day[index] += 1
        if item.kind != "user_reminder":  # reminders are exempt from the quotas
            per_user_day[(item.user_pk, at.date().isoformat())] += 1
            per_utc_day[send.at_ms // DAY_MS] += 1
    result.quota_violations = sum(n > policy.per_user_daily for n in per_user_day.values())
    result.quota_violations += sum(n > policy.global_daily for n in per_utc_day.values())
    result.max_per_user_day = max(per_user_day.values(), default=0)
    return result


async def build_report(
    vault: Vault,
    *,
    seed: int,
    days: int,
    start_ms: int,
    sim_users: list[SimUser],
    sends: list[Send],
    policy: PolicyConfig,
    plog: ProactiveLog,
    now_ms: int,
) -> dict[str, Any]:
    report = ProactiveReport(vault)
    checked = tally(sends, await _items(report), policy, start_ms, days)
    keys = [s.key for s in sends]
    intents = await report.counts("intent", "status")
    deferred = await report.deferred_intents()
    non_terminal = await report.unfinished()
    rate = await plog.engagement_rate(None, now_ms)
    by_type = await report.counts("trigger", "kind")
    return {
        "users": len(sim_users),
        "days": days,
        "seed": seed,
        "zones": len({u.zone for u in sim_users}),
        "intents": {
            "registered": sum(intents.values()),
            **{k: intents.get(k, 0) for k in INTENT_OUTCOMES},
            "deferred": deferred,
            "pending_at_end": intents.get("pending", 0),
        },
        "triggers": {t: by_type.get(t, 0) for t in TRIGGER_TYPES},
        "trigger_outcomes": await report.counts("trigger", "status"),
        "messages_sent": len(sends),
        "quiet_hour_violations": checked.quiet_violations,
        "quota_violations": checked.quota_violations,
        "duplicates": len(keys) - len(set(keys)),
        "non_terminal": non_terminal,
        "max_sends_per_user_local_day": checked.max_per_user_day,
        "engagement_rate": None if rate is None else round(rate, 4),
        "sends_per_local_hour": checked.per_hour,
        "sends_per_day": checked.per_day,
    }


def render_text(r: dict[str, Any]) -> str:
    i = r["intents"]
    rate = "n/a" if r["engagement_rate"] is None else f"{r['engagement_rate']:.1%}"
    return "\n".join([
        f"Simulated {r['users']} users over {r['days']} days in {r['zones']} time zones "
        f"(seed {r['seed']})",
        f"Intents: {i['registered']} registered — {i['sent']} sent, {i['skipped']} skipped, "
        f"{i['expired']} expired, {i['cancelled']} cancelled, {i['failed']} failed, "
        f"{i['uncertain']} uncertain; {i['deferred']} deferred at least once; "
        f"{i['pending_at_end']} still pending",
        "Triggers: " + ", ".join(f"{k} {v}" for k, v in r["triggers"].items()),
        f"Messages sent: {r['messages_sent']}; engagement rate {rate}",
        f"Max sends per user-local day: {r['max_sends_per_user_local_day']}",
        f"Invariants: quiet-hour violations {r['quiet_hour_violations']}, quota violations "
        f"{r['quota_violations']}, duplicates {r['duplicates']}, non-terminal "
        f"{r['non_terminal']}",
    ])  # fmt: skip


def _bars(title: str, labels: list[str], values: list[int]) -> str:
    width, height, pad = 640, 200, 30
    top = max(values, default=0) or 1
    bar = (width - 2 * pad) / max(len(values), 1)
    parts = [f'<h2>{html.escape(title)}</h2><svg xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height + 40}" role="img">']  # fmt: skip
    for n, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = (height - pad) * value / top
        x = pad + n * bar
        parts.append(
            f'<rect x="{x:.1f}" y="{height - h:.1f}" width="{bar * 0.8:.1f}" height="{h:.1f}" '
            f'fill="#4a7bd0"><title>{html.escape(label)}: {value}</title></rect>'
            f'<text x="{x + bar * 0.4:.1f}" y="{height + 14}" font-size="10" '
            f'text-anchor="middle">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def render_html(r: dict[str, Any]) -> str:
    outcomes = {k: v for k, v in r["intents"].items() if k in INTENT_OUTCOMES}
    body = [
        f"<pre>{html.escape(render_text(r))}</pre>",
        _bars("Sends per user-local hour", [str(h) for h in range(24)],
              r["sends_per_local_hour"]),
        _bars("Sends per day", [f"d{d + 1}" for d in range(r["days"])], r["sends_per_day"]),
        _bars("Intent outcomes", list(outcomes), list(outcomes.values())),
    ]  # fmt: skip
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Iris proactive simulation"
        "</title><style>body{font-family:sans-serif;margin:2em}</style></head><body>"
        "<h1>Iris proactive simulation</h1>" + "".join(body) + "</body></html>"
    )
