"""The limits' turn step: a per-user message rate, then the budgets, before the agent runs.

It runs after the record step (so a refused message is saved like any other) and after
commands (which stay usable: `/status` shows what is left), before the analyzer's tip and the
agent. Over `user_messages_per_minute` a message gets no answer, and its sender at most one
short notice a minute. Over a budget — checked here before anything is assembled, and by the
guard on every model call the turn makes — the user is told once per window (the vault
remembers, so a restart does not repeat it) and later messages of that window are saved
silently. Admins skip both when `[limits] admins_exempt` is set.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque

from gateway.agent.agent import payer_of
from gateway.core.errors import OverBudget, UserInputError
from gateway.limits.budgets import Budgets
from gateway.limits.notices import SLOW_DOWN
from gateway.turns.turn import Next, Step, Turn
from vault.audit import AuditLog, Outcome
from vault.spend import SpendStore

log = logging.getLogger(__name__)

MINUTE_MS = 60_000
TRACKED_USERS = 10_000
REMEMBERED_NOTICES = 10_000


class MessageRate:
    """A sliding minute of accepted messages per user; refused ones do not count."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._accepted: dict[int, deque[int]] = {}
        self._noticed: dict[int, int] = {}

    def allow(self, user_pk: int, now_ms: int) -> bool:
        if self.per_minute <= 0:
            return True
        recent = self._accepted.get(user_pk)
        if recent is None:
            if len(self._accepted) >= TRACKED_USERS:
                self._forget_idle(now_ms)
            recent = self._accepted[user_pk] = deque()
        while recent and recent[0] <= now_ms - MINUTE_MS:
            recent.popleft()
        if len(recent) >= self.per_minute:
            return False
        recent.append(now_ms)
        return True

    def notice_due(self, user_pk: int, now_ms: int) -> bool:
        """True at most once a minute per user."""
        last = self._noticed.get(user_pk)
        if last is not None and now_ms - last < MINUTE_MS:
            return False
        self._noticed[user_pk] = now_ms
        return True

    def _forget_idle(self, now_ms: int) -> None:
        idle = [u for u, recent in self._accepted.items() if not recent or
                recent[-1] <= now_ms - MINUTE_MS]  # fmt: skip
        for user in idle:
            del self._accepted[user]
            self._noticed.pop(user, None)


def limits_step(
    *,
    rate: MessageRate,
    budgets: Budgets,
    store: SpendStore,
    admins_exempt: bool,
    audit: AuditLog | None = None,
) -> Step:
    told: OrderedDict[tuple[int, str], None] = OrderedDict()

    async def first_notice(user_pk: int, window: str, now_ms: int) -> bool:
        key = (user_pk, window)
        if key in told:
            return False
        told[key] = None
        while len(told) > REMEMBERED_NOTICES:
            told.popitem(last=False)
        return await store.first_notice(user_pk, window, now_ms)

    async def limits(turn: Turn, nxt: Next) -> None:
        scope = turn.scope
        assert scope is not None, "the record step must run before the limits"
        exempt = admins_exempt and scope.is_admin
        if not exempt and not rate.allow(scope.user_pk, turn.now_ms):
            budgets.refused_message()
            log.info("%s is over the message rate; saved, not answered", scope.user.key)
            if rate.notice_due(scope.user_pk, turn.now_ms):
                try:  # over a budget too, waiting a minute would not help: that notice, once
                    await budgets.check(payer_of(scope))
                except OverBudget as exc:
                    await over_budget(turn, exc)
                    return
                raise UserInputError(SLOW_DOWN.format(limit=rate.per_minute))
            return
        try:
            await budgets.check(payer_of(scope))
            await nxt(turn)
        except OverBudget as exc:
            await over_budget(turn, exc)

    async def over_budget(turn: Turn, exc: OverBudget) -> None:
        """Raise `exc` (its notice) once per user and window; after that, silence."""
        scope = turn.scope
        assert scope is not None
        if not await first_notice(scope.user_pk, f"{exc.limit}:{exc.window}", turn.now_ms):
            log.info("%s is over %s; saved, not answered", scope.user.key, exc.limit)
            return
        if audit is not None:  # once per user and window, as the notice
            try:
                await audit.record(
                    actor=scope.user.key,
                    via=scope.chat.channel,
                    action="limits over budget",
                    args={"limit": str(exc.limit), "window": exc.window},
                    outcome=Outcome.REFUSED,
                    result="model calls refused until the window resets; notice sent",
                    now_ms=turn.now_ms,
                )
            except Exception:  # the notice matters more than its audit entry
                log.exception("could not audit %s over %s", scope.user.key, exc.limit)
        raise exc

    return limits
