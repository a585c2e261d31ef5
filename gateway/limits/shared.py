"""`SharedBudgets`: the budgets of replicas sharing one PostgreSQL vault.

`Budgets` keeps its meters in memory, which is exact while one process owns the vault (SQLite).
Replicas on PostgreSQL must count each other's calls, so here every model call reserves in the
vault instead (`vault/budget_holds.py`): one short transaction reads each meter as all replicas
see it — settled spend plus the estimates of every call in flight — judges the call with the
same rule (`gateway/limits/meters.py`), and inserts its hold only when admitted; reservations
are judged one at a time across replicas, so however many turns on however many replicas race
for the last of a budget, at most one call ends over the cap. Settling deletes the hold and
adds the real usage in one write-behind transaction, which also wakes the calls waiting on
other replicas (a NOTIFY, `hints`; a poll every `poll_s` is the fallback).

A hold lives until `lease_s` after it was made: every model call is bounded by the agent's
deadline, so a live call settles well before, and the hold of a replica that died with a call
in flight stops counting then instead of blocking its user's budget for good.

The meters in memory still carry the windows, caps, zone and exemption; their figures are
refreshed from the vault on every admission and every read (`check`, `/status`, the report),
so `/admin budget`, `GET /budget` and `/status` show every replica's spend and calls in flight.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gateway.core.budget import Hold
from gateway.core.llm import LLMRequest, Payer
from gateway.limits.budgets import Budgets, CallHold, UserMeters
from gateway.limits.meters import Meter, Verdict, judge
from gateway.limits.prices import Cost, estimate
from vault.budget_holds import NewHold, SharedSpendStore, Tallies, Tally, Windows

log = logging.getLogger(__name__)

POLL_S = 1.0  # a waiting call looks again this often when no hint arrives


def _windows(user: UserMeters | None, everyone: Meter) -> Windows:
    if user is None:
        return Windows(None, None, None, everyone.window)
    return Windows(user.user_pk, user.usd_day.window, user.usd_month.window, everyone.window)


def _pairs(user: UserMeters | None, everyone: Meter, t: Tallies) -> list[tuple[Meter, Tally]]:
    mine = (
        [(user.tokens_day, t.tokens_day), (user.usd_day, t.usd_day), (user.usd_month, t.usd_month)]
        if user is not None
        else []
    )
    return [*mine, (everyone, t.global_day)]


def _rule(user: UserMeters | None, everyone: Meter, cost: Cost) -> Callable[[Tallies], bool]:
    """Whether a call costing `cost` is admitted against the meters with these tallies
    (judged on copies: it runs on the vault's writer thread)."""
    exempt = user is not None and user.exempt

    def admits(tallies: Tallies) -> bool:
        shadow = [
            (
                replace(m, committed=t.committed, reserved=t.reserved, in_flight=t.in_flight),
                cost.tokens if m.limit.in_tokens else cost.usd_micros,
            )
            for m, t in _pairs(user, everyone, tallies)
        ]
        return exempt or judge(shadow)[0] is Verdict.ADMIT

    return admits


def _apply(pairs: list[tuple[Meter, Tally]]) -> None:
    for meter, tally in pairs:
        meter.committed, meter.reserved, meter.in_flight = (
            tally.committed, tally.reserved, tally.in_flight,
        )  # fmt: skip


class SharedBudgets(Budgets):
    def __init__(
        self, *, store: SharedSpendStore, owner: str, lease_s: float, poll_s: float = POLL_S,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(store=store, **kwargs)
        self.shared = store
        self.owner = owner
        self.lease_ms = int(lease_s * 1000)
        self.poll_s = poll_s

    def _record(
        self, cost: Cost, user: tuple[int, str] | None, global_day: str, hold: str | None
    ) -> None:
        """Settle the call's hold in the vault (write-behind) with what it really used (if
        this fails the hold expires); the meters in memory were settled by the hold until the
        next refresh from the vault."""
        assert hold is not None  # every call admitted here holds a reservation
        self.shared.settle_soon(
            hold, user=user, global_day=global_day, tokens=cost.tokens, usd_micros=cost.usd_micros
        )

    def hint(self, payload: str) -> None:
        """A wake-up hint from another replica (`vault/pg/notify.py`)."""
        self.wake()

    async def admit(self, request: LLMRequest, model: str) -> Hold:
        cost = estimate(request, self.prices.of(model))
        while True:
            user, everyone = await Budgets._meters(self, request.payer)  # windows, caps: local
            now = self.clock.now_ms()
            hold = NewHold(
                hold=secrets.token_hex(12), owner=self.owner, tokens=cost.tokens,
                usd_micros=cost.usd_micros, expires_ms=now + self.lease_ms,
            )  # fmt: skip
            changed = self._changed  # a settle or hint from here on wakes this call
            rule = _rule(user, everyone, cost)
            tallies, admitted = await self.shared.reserve(_windows(user, everyone), hold, now, rule)
            pairs = _pairs(user, everyone, tallies)
            _apply(pairs)
            checks = [(m, cost.tokens if m.limit.in_tokens else cost.usd_micros) for m, _ in pairs]
            if admitted:
                for m, amount in checks:
                    m.reserve(amount)
                day = (user.user_pk, user.usd_day.window) if user else None
                return CallHold(self, checks, request, model, day, everyone.window, hold.hold)
            verdict, meter = judge(checks)
            assert meter is not None
            if verdict is Verdict.REFUSE:
                raise self._refused(meter, user)
            try:
                async with asyncio.timeout(self.poll_s):
                    await changed.wait()
            except TimeoutError:
                pass  # no hint came: look again anyway (a hold may have expired)

    async def _meters(self, payer: Payer | None) -> tuple[UserMeters | None, Meter]:
        """The meters, their figures as every replica sees them now."""
        user, everyone = await Budgets._meters(self, payer)
        tallies = await self.shared.tallies(_windows(user, everyone), self.clock.now_ms())
        _apply(_pairs(user, everyone, tallies))
        return user, everyone
