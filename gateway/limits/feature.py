"""Spending limits and the message rate as a feature, plugged in through the seam.

It contributes the `CallGuard` every model call passes (`Budgets`: chat turns, `/compact`, the
proactive gate and the analyzer's confirmation all go through `Agent.call`), the intake step
(message rate, then budgets, before the analyzer and the agent), `/admin budget [user]`,
`GET /budget?user=` and the spend and refusal counters of `/metrics`. What it built stays on
the feature (`budgets`, `rate`, `report`) for tests and tools to reach.

The one place the backends differ: on SQLite one process owns the vault and `Budgets` keeps the
totals and reservations in memory; on PostgreSQL replicas share it, so `SharedBudgets` reserves
and settles every call in the vault (`gateway/limits/shared.py`) and listens for the other
replicas' settles. A hold lasts the agent's model deadline plus `HOLD_MARGIN_S`, so one left by
a replica that died expires then.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.core.messages import UserRef
from gateway.features.contributions import ApiRead, Contributions
from gateway.limits.admin import BudgetReport
from gateway.limits.budgets import Budgets
from gateway.limits.intake import MessageRate, limits_step
from gateway.limits.settings import LimitsSection
from gateway.limits.shared import SharedBudgets
from gateway.turns.auth import Authorizer
from vault.audit import AuditLog
from vault.budget_holds import BUDGET_HINTS, SharedSpendStore
from vault.spend import SpendStore

HOLD_MARGIN_S = 30.0  # beyond the model deadline: settling and its commit, with room to spare


class LimitsFeature:
    name = "limits"

    def __init__(
        self,
        settings: LimitsSection,
        *,
        admins: Sequence[str] = (),
        default_timezone: str = "UTC",
        model_deadline_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self.default_timezone = default_timezone
        self.model_deadline_s = model_deadline_s  # `[llm] turn_deadline_seconds`
        self._admins = Authorizer(admins=admins, allow=())

    def _is_admin(self, key: str) -> bool:
        channel, _, user_id = key.partition(":")
        return self._admins.is_admin(UserRef(channel=channel, user_id=user_id))

    def _budgets(self, c: Contributions) -> tuple[SpendStore, Budgets]:
        s = c.services
        if s.vault.dialect != "postgresql":  # one process owns the vault: totals in memory
            store = SpendStore(s.vault)
            return store, Budgets(
                settings=self.settings, store=store, clock=s.clock, metrics=s.metrics,
                is_admin=self._is_admin, default_timezone=self.default_timezone,
            )  # fmt: skip
        shared = SharedSpendStore(s.vault)  # replicas share the vault: so do the budgets
        budgets = SharedBudgets(
            store=shared, owner=s.replica_id, lease_s=self.model_deadline_s + HOLD_MARGIN_S,
            settings=self.settings, clock=s.clock, metrics=s.metrics, is_admin=self._is_admin,
            default_timezone=self.default_timezone,
        )  # fmt: skip
        if (hints := s.hints(BUDGET_HINTS)) is not None:
            c.background(lambda: hints.run(budgets.hint))
        return shared, budgets

    def contribute(self, c: Contributions) -> None:
        s, settings = c.services, self.settings
        self.store, self.budgets = store, budgets = self._budgets(c)
        self.rate = rate = MessageRate(settings.user_messages_per_minute)
        c.call_guard(budgets)
        c.step(
            limits_step(
                rate=rate,
                budgets=budgets,
                store=store,
                admins_exempt=settings.admins_exempt,
                audit=AuditLog(s.vault),
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
