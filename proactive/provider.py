"""What the model knows about its proactive side in every turn, and engagement marking.

`ProactiveProvider` adds a per-request system item (phase SYSTEM, position SYSTEM: it changes
with every message, so it stays out of the cached prefix): the quota left today in the user's
local day, the engagement rate, the pending follow-ups with their ids, and when to register
one.
Engagement is marked by `vault.proactive.log.engagement_record_hook`, inside the transaction
that records the user's message.
"""

from __future__ import annotations

from gateway.agent.context import ContextItem, Phase, Position
from gateway.core.scope import Scope
from proactive.policy import PolicyConfig, local, local_day_start_ms, user_prefs
from proactive.tools import render_quota
from vault.proactive.log import ProactiveLog
from vault.proactive.store import ProactiveStore

GUIDE = (
    "You can follow up later on your own. When the user commits to something (\"I'll fix the "
    'server tomorrow") or asks to be reminded, register it with proactive_intent '
    "(kind=user_reminder for reminders the user asked for; give `at` with the UTC offset when "
    "they named an exact time). Be conservative: only follow-ups that are genuinely useful; "
    "cancel ones that became moot with proactive_cancel."
)
MAX_LISTED = 5


class ProactiveProvider:
    name = "proactive"
    phase = Phase.SYSTEM
    priority = 40

    def __init__(self, store: ProactiveStore, plog: ProactiveLog, policy: PolicyConfig) -> None:
        self.store = store
        self.plog = plog
        self.policy = policy

    async def provide(self, scope: Scope) -> list[ContextItem] | None:
        zone = user_prefs(scope.timezone, {}, self.policy).zone
        seen = await self.plog.overview(
            scope.user_pk,
            day_start_ms=local_day_start_ms(scope.now_ms, zone),
            now_ms=scope.now_ms,
            pending=MAX_LISTED + 1,
        )
        # In a group only this chat's follow-ups: the others are between the user and Iris.
        pending = [i for i in seen.pending if not scope.in_group or i.chat == scope.chat_pk]
        lines = [GUIDE, render_quota(seen, self.policy)]
        if pending:
            lines.append(
                f"Pending follow-ups ({len(pending)}{'+' if len(pending) > MAX_LISTED else ''}):"
            )
            lines += [
                f"- #{i.id} {local(i.execute_at, zone):%a %H:%M}: {i.what}"
                for i in pending[:MAX_LISTED]
            ]
        else:
            lines.append("Pending follow-ups: none.")
        return [
            ContextItem(
                source=self.name,
                position=Position.SYSTEM,
                content="\n".join(lines),
                relevance=0.7,
                reason="proactive quota and follow-ups",
            )
        ]
