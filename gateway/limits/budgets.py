"""`Budgets`: the `CallGuard` the agent consults before every model call and tells after it.

Each user has three meters (tokens per local day, dollars per local day and per local month)
and everyone shares one (dollars per UTC day). The running totals live in memory — a call's
check is a few comparisons, never a vault round trip — and are read from the vault once per
user per process (`vault/spend.py`), so a restart resumes from what was spent. A meter whose
window has passed is replaced by a fresh one when next asked. Every settled call is added to
the vault write-behind; every refusal is counted there and in `/metrics`.

`admit` reserves the call's estimated cost on every meter that applies, or waits while a call
in flight might take the last of a budget, or raises `OverBudget` with the text the user reads
(`gateway/limits/meters.py` has the rule and why at most one call ends over a cap).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from gateway.core.budget import Hold
from gateway.core.errors import OverBudget, VaultError
from gateway.core.llm import LLMRequest, LLMResponse, Payer
from gateway.core.metrics import Metrics
from gateway.core.ports import Clock
from gateway.limits.meters import Limit, Meter, Verdict, judge
from gateway.limits.notices import over_budget, status_line
from gateway.limits.prices import Cost, PriceTable, estimate, usage_cost
from gateway.limits.settings import LimitsSection
from gateway.limits.windows import UTC_ZONE, day_window, month_window, utc_day_window, zone_of
from vault.spend import SpendStore

log = logging.getLogger(__name__)


def micros(dollars: float) -> int:
    return round(dollars * 1_000_000)


@dataclass(slots=True)
class UserMeters:
    user_pk: int
    user_key: str | None
    zone: ZoneInfo
    exempt: bool
    tokens_day: Meter
    usd_day: Meter
    usd_month: Meter

    @property
    def meters(self) -> tuple[Meter, Meter, Meter]:
        return (self.tokens_day, self.usd_day, self.usd_month)


class CallHold:
    """One admitted call's reservations, settled once with what it really used. `hold`: its
    reservation's id in the vault, when replicas share the budgets (`shared.py`)."""

    __slots__ = ("_budgets", "_checks", "_global_day", "_hold", "_model", "_purpose", "_user")

    def __init__(
        self,
        budgets: Budgets,
        checks: list[tuple[Meter, int]],
        request: LLMRequest,
        model: str,
        user: tuple[int, str] | None,
        global_day: str,
        hold: str | None = None,
    ) -> None:
        self._budgets = budgets
        self._hold = hold
        self._checks = checks
        self._model = model
        self._purpose = request.purpose
        self._user = user
        self._global_day = global_day

    def settle(self, response: LLMResponse | None) -> None:
        budgets = self._budgets
        cost = Cost(0, 0)
        if response is not None:
            cost = usage_cost(response, budgets.prices.of(self._model))
        for meter, reserved in self._checks:
            meter.settle(reserved, cost.tokens if meter.limit.in_tokens else cost.usd_micros)
        budgets.spent(cost, self._purpose, self._model, self._user, self._global_day, self._hold)


class Budgets:
    def __init__(
        self,
        *,
        settings: LimitsSection,
        store: SpendStore,
        clock: Clock,
        metrics: Metrics,
        is_admin: Callable[[str], bool],
        default_timezone: str,
    ) -> None:
        self.settings = settings
        self.prices = PriceTable(settings.prices)
        self.store = store
        self.clock = clock
        self._is_admin = is_admin
        self._default_timezone = default_timezone
        self._users: dict[int, UserMeters] = {}
        self._global: Meter | None = None
        self._loading = asyncio.Lock()
        self._changed = asyncio.Event()
        self.spend_metric = metrics.counter(
            "iris_spend_usd_total", "Model spend in US dollars, by purpose and model.",
            ("purpose", "model"),
        )  # fmt: skip
        self.refusal_metric = metrics.counter(
            "iris_budget_refusals_total",
            "Model calls and messages refused by a limit of [limits], by limit.",
            ("limit",),
        )

    # --- the CallGuard port ----------------------------------------------------------------

    async def admit(self, request: LLMRequest, model: str) -> Hold:
        cost = estimate(request, self.prices.of(model))
        payer = request.payer
        while True:
            user, everyone = await self._meters(payer)
            checks = [
                (m, cost.tokens if m.limit.in_tokens else cost.usd_micros)
                for m in (*(user.meters if user else ()), everyone)
            ]
            verdict, meter = judge(checks)
            if user is not None and user.exempt:
                verdict = Verdict.ADMIT
            if verdict is Verdict.ADMIT:
                for m, amount in checks:
                    m.reserve(amount)
                day = (user.user_pk, user.usd_day.window) if user else None
                return CallHold(self, checks, request, model, day, everyone.window)
            assert meter is not None
            if verdict is Verdict.REFUSE:
                raise self._refused(meter, user)
            changed = self._changed
            await changed.wait()

    async def remaining(self, payer: Payer) -> str | None:
        user, everyone = await self._meters(payer)
        assert user is not None
        return status_line((*user.meters, everyone), user.zone, exempt=user.exempt)

    # --- for the intake step, `/admin budget` and `GET /budget` ------------------------------

    async def check(self, payer: Payer) -> None:
        """Raise `OverBudget` if one of the payer's budgets is already used up."""
        user, everyone = await self._meters(payer)
        if user is None or user.exempt:
            return
        for meter in (*user.meters, everyone):
            if meter.exhausted:
                raise self._refused(meter, user)

    async def user_meters(self, payer: Payer) -> UserMeters:
        user, _ = await self._meters(payer)
        assert user is not None
        return user

    async def global_meter(self) -> Meter:
        _, everyone = await self._meters(None)
        return everyone

    def refused_message(self) -> None:
        """Count a message refused at intake (`user_messages_per_minute`)."""
        self.refusal_metric.inc(Limit.USER_MESSAGES_PER_MINUTE)

    # --- bookkeeping -------------------------------------------------------------------------

    def spent(
        self,
        cost: Cost,
        purpose: str,
        model: str,
        user: tuple[int, str] | None,
        global_day: str,
        hold: str | None = None,
    ) -> None:
        self.spend_metric.inc(purpose, model, amount=cost.usd_micros / 1_000_000)
        try:
            self._record(cost, user, global_day, hold)
        except VaultError:  # bookkeeping must never replace the call's own outcome
            log.exception("could not record model spend")
        self.wake()

    def _record(
        self, cost: Cost, user: tuple[int, str] | None, global_day: str, hold: str | None
    ) -> None:
        """Write the call's real usage to the vault (write-behind)."""
        if cost.tokens:
            self.store.add_soon(
                user=user, global_day=global_day, tokens=cost.tokens, usd_micros=cost.usd_micros
            )

    def wake(self) -> None:
        """Calls waiting for the budgets to change judge again."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _refused(self, meter: Meter, user: UserMeters | None) -> OverBudget:
        self.refusal_metric.inc(meter.limit)
        zone = user.zone if user is not None else UTC_ZONE
        try:
            self.store.refused_soon(
                user=(user.user_pk, user.usd_day.window) if user else None,
                global_day=self._global.window if self._global else meter.window,
            )
        except VaultError:
            log.exception("could not count a budget refusal")
        log.info("model call refused: %s %s used up", meter.limit, meter.window)
        return OverBudget(
            over_budget(meter, zone),
            limit=meter.limit.value,
            window=meter.window,
            resets_at_ms=meter.resets_at_ms,
        )

    async def _meters(self, payer: Payer | None) -> tuple[UserMeters | None, Meter]:
        now = self.clock.now_ms()
        everyone = self._global
        if everyone is None or now >= everyone.resets_at_ms:
            everyone = await self._load_global(now)
        if payer is None:
            return None, everyone
        user = self._users.get(payer.user_pk)
        zone = zone_of(payer.timezone, self._default_timezone)
        if user is None or user.zone != zone:
            user = await self._load_user(payer.user_pk, zone, now, earlier=user)
        self._roll(user, now)
        return user, everyone

    def _roll(self, user: UserMeters, now: int) -> None:
        """Fresh meters for windows that have passed (the spend of the new day starts at 0)."""
        if now >= user.usd_day.resets_at_ms:
            day = day_window(now, user.zone)
            user.tokens_day = self._meter(Limit.USER_TOKENS_PER_DAY, day.label, day.end_ms, 0)
            user.usd_day = self._meter(Limit.USER_USD_PER_DAY, day.label, day.end_ms, 0)
        if now >= user.usd_month.resets_at_ms:
            month = month_window(now, user.zone)
            user.usd_month = self._meter(Limit.USER_USD_PER_MONTH, month.label, month.end_ms, 0)

    def _meter(self, limit: Limit, window: str, resets_at_ms: int, committed: int) -> Meter:
        s = self.settings
        cap = {
            Limit.USER_TOKENS_PER_DAY: s.user_tokens_per_day,
            Limit.USER_USD_PER_DAY: micros(s.user_usd_per_day),
            Limit.USER_USD_PER_MONTH: micros(s.user_usd_per_month),
            Limit.GLOBAL_USD_PER_DAY: micros(s.global_usd_per_day),
        }[limit]
        return Meter(limit, window, resets_at_ms, cap, committed)

    async def _load_user(
        self, user_pk: int, zone: ZoneInfo, now: int, *, earlier: UserMeters | None
    ) -> UserMeters:
        """The user's meters in `zone`; `earlier`: their meters in the zone they had."""
        async with self._loading:
            found = self._users.get(user_pk)
            if found is not None and found.zone == zone:
                return found  # another call loaded it meanwhile
            day, month = day_window(now, zone), month_window(now, zone)
            if earlier is not None:  # the user changed time zone: count from the vault,
                await self.store.vault.idle()  # once everything landed
                if now < earlier.usd_day.resets_at_ms:  # today's spend follows them to their
                    # new today (a zone already in tomorrow would buy a fresh day's budget)
                    await self.store.follow_day(user_pk, earlier.usd_day.window, day.label)
            spend = await self.store.user(user_pk, day.label)
            key = spend.user_key
            user = UserMeters(
                user_pk=user_pk,
                user_key=key,
                zone=zone,
                exempt=self.settings.admins_exempt and key is not None and self._is_admin(key),
                tokens_day=self._meter(
                    Limit.USER_TOKENS_PER_DAY, day.label, day.end_ms, spend.day.tokens
                ),
                usd_day=self._meter(
                    Limit.USER_USD_PER_DAY, day.label, day.end_ms, spend.day.usd_micros
                ),
                usd_month=self._meter(
                    Limit.USER_USD_PER_MONTH, month.label, month.end_ms, spend.month.usd_micros
                ),
            )
            self._users[user_pk] = user
            return user

    async def _load_global(self, now: int) -> Meter:
        async with self._loading:
            known = self._global
            if known is not None and now < known.resets_at_ms:
                return known
            day = utc_day_window(now)
            spent = 0 if known is not None else (await self.store.everyone(day.label)).usd_micros
            self._global = self._meter(Limit.GLOBAL_USD_PER_DAY, day.label, day.end_ms, spent)
            return self._global
