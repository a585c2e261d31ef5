"""The simulator's facts: what one run saw, read from its vault; shards' facts merged; the report.

A run — of the whole population or of a shard of it (`proactive/sim_shards.py`) — ends with
its `Facts`: every message the channel received as a `Delivered` (its item's name, the user's
place in the population, zone and quiet hours: nothing that depends on row ids), the items by
state and type, and the engagement log. Facts of shards add up (`merge`), and `build_report`
turns them into the report, its invariants checked by `proactive/sim_report.py`'s own code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from proactive.policy import PolicyConfig
from proactive.sim_report import (
    DAY,
    GAP_BUCKETS,
    INTENT_OUTCOMES,
    MINUTE,
    Delivered,
    Send,
    SimUser,
    delivered,
    percentile,
    tally_delivered,
)
from vault.db import Vault
from vault.proactive.log import RATE_WINDOW_MS
from vault.proactive.report import ProactiveReport, ReportItem
from vault.proactive.store import TRIGGER_TYPES


async def _items(report: ProactiveReport) -> dict[str, ReportItem]:
    """Every item by the idempotency key its send carries (as the engine builds it)."""
    return {f"proactive:{i.source}:{i.id}": i for i in await report.items()}


@dataclass(slots=True)
class Facts:
    """What one run saw — of the whole population, or of a shard of it (`merge` adds shards)."""

    users: int = 0
    zones: set[str] = field(default_factory=set)
    delivered: list[Delivered] = field(default_factory=list)
    intents: Counter[str] = field(default_factory=Counter)  # by status
    deferred: int = 0
    triggers: Counter[str] = field(default_factory=Counter)  # by type
    trigger_outcomes: Counter[str] = field(default_factory=Counter)
    unfinished: int = 0
    gate_tool_calls: int = 0
    engagement: list[tuple[int, bool]] = field(default_factory=list)  # (sent_at, engaged)
    # Proactive log rows per UTC day: at least what the global quota counted at any time.
    log_days: Counter[int] = field(default_factory=Counter)
    now_ms: int = 0  # the virtual time at the end


async def collect(
    vault: Vault,
    *,
    sends: list[Send],
    names: Callable[[str], str],
    users: dict[int, SimUser],
    policy: PolicyConfig,
    gate_tool_calls: int = 0,
    now_ms: int,
) -> Facts:
    """The facts of a run from its vault and its raw send log; `names` maps a send's key to its
    item's name, and users are known by their index in the population."""
    report = ProactiveReport(vault)
    items = await _items(report)
    index = {u.pk: u.index for u in users.values()}
    log = [
        delivered(s, item, policy, key=names(s.key), user=index[item.user_pk])
        for s in sends
        for item in (items[s.key],)
    ]
    return Facts(
        users=len(users),
        zones={u.zone for u in users.values()},
        delivered=log,
        intents=Counter(await report.counts("intent", "status")),
        deferred=await report.deferred_intents(),
        triggers=Counter(await report.counts("trigger", "kind")),
        trigger_outcomes=Counter(await report.counts("trigger", "status")),
        unfinished=await report.unfinished(),
        gate_tool_calls=gate_tool_calls,
        engagement=await report.engagement(),
        log_days=Counter(await report.log_days()),
        now_ms=now_ms,
    )


def merge(parts: list[Facts]) -> Facts:
    whole = Facts()
    for part in parts:
        whole.users += part.users
        whole.zones |= part.zones
        whole.delivered += part.delivered
        whole.intents += part.intents
        whole.deferred += part.deferred
        whole.triggers += part.triggers
        whole.trigger_outcomes += part.trigger_outcomes
        whole.unfinished += part.unfinished
        whole.gate_tool_calls += part.gate_tool_calls
        whole.engagement += part.engagement
        whole.log_days += part.log_days
        whole.now_ms = max(whole.now_ms, part.now_ms)
    return whole


def build_report(
    facts: Facts, *, seed: int, days: int, start_ms: int, policy: PolicyConfig
) -> dict[str, Any]:
    checked = tally_delivered(facts.delivered, policy, start_ms, days)
    keys = [d.key for d in facts.delivered]
    intents = facts.intents
    recent = [engaged for at, engaged in facts.engagement if at >= facts.now_ms - RATE_WINDOW_MS]
    rate = sum(recent) / len(recent) if recent else None
    by_type = facts.triggers
    engaged_per_day = {"sent": [0] * days, "engaged": [0] * days}
    for at, engaged in facts.engagement:
        day = (at - start_ms) // DAY
        if 0 <= day < days:
            engaged_per_day["sent"][day] += 1
            engaged_per_day["engaged"][day] += engaged
    gated = checked.gated
    busiest = max(checked.per_hour["gated"], default=0)
    return {
        "users": facts.users,
        "days": days,
        "seed": seed,
        "zones": len(facts.zones),
        "start": datetime.fromtimestamp(start_ms / 1000, UTC).isoformat(),
        "settings": {
            "quiet_hours": [policy.quiet_start, policy.quiet_end],
            "per_user_daily": policy.per_user_daily,
            "global_daily": policy.global_daily,
            "min_spacing_minutes": policy.min_spacing_ms / MINUTE,
            "release_window_minutes": policy.release_window_ms / MINUTE,
        },
        "intents": {
            "registered": sum(intents.values()),
            **{k: intents.get(k, 0) for k in INTENT_OUTCOMES},
            "deferred": facts.deferred,
            "pending_at_end": intents.get("pending", 0),
        },
        "triggers": {t: by_type.get(t, 0) for t in TRIGGER_TYPES},
        "trigger_outcomes": dict(sorted(facts.trigger_outcomes.items())),
        "gate_tool_calls": facts.gate_tool_calls,
        "messages_sent": len(keys),
        "gated_sends": gated,
        "reminder_sends": checked.reminders,
        "quiet_hour_violations": checked.quiet_violations,
        "quota_violations": checked.quota_violations,
        "spacing_violations": checked.spacing_violations,
        "duplicates": len(keys) - len(set(keys)),
        "non_terminal": facts.unfinished,
        "max_sends_per_user_local_day": checked.max_per_user_day,
        "max_sends_per_user_hour": checked.max_per_user_hour,
        "max_gated_sends_per_user_hour": checked.max_gated_per_user_hour,
        "min_gap_minutes_per_user": {
            "min": min(checked.min_gaps, default=None),
            "p5": percentile(checked.min_gaps, 0.05),
            "users": len(checked.min_gaps),
        },
        "gated_gap_minutes": {label: checked.gap_counts[label] for _, label in GAP_BUCKETS},
        "first_hour_after_quiet_share": round(checked.first_hour_after_quiet / gated, 4)
        if gated
        else None,
        "max_local_hour_share": round(busiest / gated, 4) if gated else None,
        "engagement_rate": None if rate is None else round(rate, 4),
        "engagement_per_day": engaged_per_day,
        "sends_per_local_hour": checked.per_hour,
        "sends_per_day": checked.per_day,
    }
