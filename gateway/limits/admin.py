"""The admin view of the budgets: `/admin budget [user]` in chat and `GET /budget?user=`.

One report, as JSON for the API and as text for chat: a user's meters (spent, reserved by calls
in flight, left, when each resets in their zone) and everyone's; without a user, everyone's
meter and who spent most on their own current day. The figures are the live meters, the same
ones every model call is checked against. Both surfaces audit the request (`/admin` through
its dispatcher, the API through its endpoint wrapper).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gateway.core.admin_ops import JSON
from gateway.core.errors import NotFound, UserInputError
from gateway.core.llm import Payer
from gateway.core.messages import UserRef
from gateway.core.ports import Clock
from gateway.features.contributions import AdminSub
from gateway.limits.budgets import Budgets
from gateway.limits.meters import Meter
from gateway.limits.notices import dollars
from gateway.limits.windows import iso_local, local_date, utc_day_window, zone_of
from gateway.turns.commands import CommandCall
from vault.conversations import Conversations
from vault.spend import SpendStore

TOP_USERS = 20


def _value(meter: Meter, value: int) -> float | int:
    return value if meter.limit.in_tokens else round(value / 1_000_000, 6)


def meter_json(meter: Meter, zone_name: str) -> JSON:
    zone = zone_of(zone_name, "UTC")
    return {
        "limit": meter.limit.value,
        "window": meter.window,
        "unit": "tokens" if meter.limit.in_tokens else "usd",
        "cap": _value(meter, meter.cap) if meter.cap > 0 else None,
        "spent": _value(meter, meter.committed),
        "reserved": _value(meter, meter.reserved),
        "remaining": _value(meter, meter.remaining) if meter.cap > 0 else None,
        "resets_at": iso_local(meter.resets_at_ms, zone),
    }


class BudgetReport:
    def __init__(
        self,
        *,
        budgets: Budgets,
        store: SpendStore,
        conversations: Conversations,
        clock: Clock,
        default_timezone: str,
    ) -> None:
        self.budgets = budgets
        self.store = store
        self.conversations = conversations
        self.clock = clock
        self.default_timezone = default_timezone

    async def report(self, user_key: str | None) -> JSON:
        everyone = meter_json(await self.budgets.global_meter(), "UTC")
        if user_key is None:
            return {"global": everyone, "users_today": await self._top_users()}
        channel, _, user_id = user_key.partition(":")
        row = await self.conversations.get_user(UserRef(channel=channel, user_id=user_id))
        if row is None:
            raise NotFound(f"No user {user_key[:80]} has written to Iris yet.")
        user = await self.budgets.user_meters(Payer(user_pk=row.pk, timezone=row.timezone))
        mine = {
            "user": user_key,
            "timezone": user.zone.key,
            "exempt": user.exempt,
            "budgets": [meter_json(m, user.zone.key) for m in user.meters],
        }
        return {"user": mine, "global": everyone}  # the user first: the audit keeps the start

    async def _top_users(self) -> list[JSON]:
        now = self.clock.now_ms()
        yesterday = utc_day_window(now - int(timedelta(days=1).total_seconds() * 1000))
        found: list[JSON] = []
        for row in await self.store.recent_days(yesterday.label):
            zone = zone_of(row.timezone, self.default_timezone)
            if row.day != local_date(now, zone).isoformat():
                continue  # an earlier day of theirs
            found.append(
                {
                    "user": row.user_key,
                    "day": row.day,
                    "usd": round(row.spent.usd_micros / 1_000_000, 6),
                    "tokens": row.spent.tokens,
                    "calls": row.spent.calls,
                    "refusals": row.spent.refusals,
                }
            )
        return found[:TOP_USERS]

    def admin_sub(self) -> AdminSub:
        return AdminSub(
            "budget",
            "[user]",
            "model spend against [limits]: a user's (e.g. telegram:123), or everyone's today",
            self._chat,
        )

    async def _chat(self, call: CommandCall, args: str) -> str:
        key = args.strip() or None
        if key is not None and (":" not in key or " " in key):
            raise UserInputError(
                f"Usage: {call.hint('admin')} budget [user] — a user key such as telegram:12345."
            )
        return render(await self.report(key))


def _line(item: dict[str, Any]) -> str:
    unit = item["unit"]

    def show(value: float | int) -> str:
        return f"{value:,}" if unit == "tokens" else dollars(value)

    cap = "(no limit)" if item["cap"] is None else f"of {show(item['cap'])}"
    reserved = f" (+{show(item['reserved'])} in flight)" if item["reserved"] else ""
    return (
        f"• {item['limit']} {item['window']}: {show(item['spent'])} spent{reserved} {cap}; "
        f"resets {item['resets_at']}"
    )


def render(report: JSON) -> str:
    lines: list[str] = []
    user = report.get("user")
    if user is not None:
        exempt = " — exempt (admin)" if user["exempt"] else ""
        lines.append(f"Budget of {user['user']} ({user['timezone']}){exempt}:")
        lines.extend(_line(item) for item in user["budgets"])
    lines.append("Everyone:")
    lines.append(_line(report["global"]))
    top = report.get("users_today")
    if top is not None:
        if not top:
            lines.append("Nobody has spent anything on their current day.")
        for row in top:
            lines.append(
                f"• {row['user']} on {row['day']}: {dollars(row['usd'])}, "
                f"{row['tokens']:,} tokens, {row['calls']} calls, {row['refusals']} refused"
            )
    return "\n".join(lines)
