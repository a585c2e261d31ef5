"""Spending limits and the message rate as a feature, plugged in through the seam.

It contributes the `CallGuard` every model call passes (`Budgets`: chat turns, `/compact`, the
proactive gate and the analyzer's confirmation all go through `Agent.call`), the intake step
(message rate, then budgets, before the analyzer and the agent), `/admin budget [user]`,
`GET /budget?user=` and the spend and refusal counters of `/metrics`. What it built stays on
the feature (`budgets`, `rate`, `report`) for tests and tools to reach.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.core.messages import UserRef
from gateway.features.contributions import ApiRead, Contributions
from gateway.limits.admin import BudgetReport
from gateway.limits.budgets import Budgets
from gateway.limits.intake import MessageRate, limits_step
from gateway.limits.settings import LimitsSection
from gateway.turns.auth import Authorizer
from vault.spend import SpendStore


class LimitsFeature:
    name = "limits"

    def __init__(
        self, settings: LimitsSection, *, admins: Sequence[str] = (), default_timezone: str = "UTC"
    ) -> None:
        self.settings = settings
        self.default_timezone = default_timezone
        self._admins = Authorizer(admins=admins, allow=())

    def _is_admin(self, key: str) -> bool:
        channel, _, user_id = key.partition(":")
        return self._admins.is_admin(UserRef(channel=channel, user_id=user_id))

    def contribute(self, c: Contributions) -> None:
        s, settings = c.services, self.settings
        self.store = store = SpendStore(s.vault)
        self.budgets = budgets = Budgets(
            settings=settings,
            store=store,
            clock=s.clock,
            metrics=s.metrics,
            is_admin=self._is_admin,
            default_timezone=self.default_timezone,
        )
        self.rate = rate = MessageRate(settings.user_messages_per_minute)
        c.call_guard(budgets)
        c.step(
            limits_step(
                rate=rate, budgets=budgets, store=store, admins_exempt=settings.admins_exempt
            )
        )
        self.report = report = BudgetReport(
            budgets=budgets,
            store=store,
            conversations=s.conversations,
            clock=s.clock,
            default_timezone=self.default_timezone,
        )
        c.admin(report.admin_sub())
        c.api_read(
            ApiRead(
                "/budget",
                "Model spend against [limits]: a user's budgets (query: user) and everyone's",
                report.report,
            )
        )
