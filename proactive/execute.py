"""Executing one claimed item: policy -> gate -> deliver -> record, ending in one outcome.

Every path ends in a state change guarded by the claim token: a terminal state with a reason,
a reschedule (quiet hours, quota, the model's defer, a model that is down or not configured),
or `delivering` followed by the send's outcome. The outbox row is written in the same
transaction as `delivering`, before the network call; a send whose outcome is unknown ends as
`uncertain` and is never retried; a delivered message's terminal state and assistant turn
commit in the transaction that marks its outbox row `sent`. The quota counts, engagement rate
and memories come from the tick's `TickCache`; the quota itself is enforced inside the
`delivering` transaction. Without a model (no API key) AI follow-ups wait (rescheduled
hourly until they expire at the maximum age) while user reminders go out as a plain
"Reminder: …" text; the gate's decision to skip can't suppress a reminder either.
"""

from __future__ import annotations

import logging
import random
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from gateway.core.errors import (
    DeliveryUncertain,
    ModelError,
    ModelNotConfigured,
    ModelUnavailable,
)
from gateway.core.llm import LLMRequest, LLMResponse
from gateway.core.messages import Outbound, OutboundKind
from gateway.core.ports import Clock
from gateway.turns.delivery import DeliveryStatus
from proactive.gate import (
    Decision,
    GateContext,
    gate_request,
    meta_prompt,
    parse_decision,
    reminder_text,
)
from proactive.outcome import Outcome
from proactive.policy import (
    HOUR_MS,
    Action,
    Candidate,
    PolicyConfig,
    QuotaCounts,
    UserPrefs,
    Verdict,
    decide,
    local,
    local_day_start_ms,
    next_allowed_ms,
    user_prefs,
    utc_day_start_ms,
)
from proactive.tick import TickCache
from vault.batch import SyncBody
from vault.memories import Memories
from vault.proactive.log import ProactiveLog
from vault.proactive.store import Item, ItemStatus, LostClaim, ProactiveStore, QuotaCheck
from vault.proactive.tx import complete_in

log = logging.getLogger(__name__)

NO_MODEL_RETRY_MS = HOUR_MS
MODEL_DOWN_RETRY_MS = 15 * 60_000
TRIGGER_HEADERS = {
    "dormant_user": "A passive scan noticed this user has gone quiet",
    "unanswered": "A passive scan noticed your question was never answered",
    "engagement_drop": "A passive scan noticed this user writes much less than usual",
    "external": "An external trigger asks you to consider reaching out",
}

ModelCall = Callable[[LLMRequest, str | None], Awaitable[LLMResponse]]
ChatLock = Callable[[str], AbstractAsyncContextManager[None]]
Probe = Callable[[str, Item], Awaitable[None]]


class SendResult(Protocol):
    @property
    def status(self) -> DeliveryStatus: ...


class Deliver(Protocol):
    """`Delivery.deliver_pending`: send a `pending` outbox row; `on_sent` commits with `sent`."""

    def __call__(
        self,
        row_id: int,
        out: Outbound,
        *,
        on_sent: SyncBody[None] | None = None,
    ) -> Awaitable[SendResult]: ...


async def no_probe(step: str, item: Item) -> None:
    return None


@dataclass
class Executor:
    store: ProactiveStore
    plog: ProactiveLog
    memories: Memories
    call_model: ModelCall
    deliver: Deliver
    chat_lock: ChatLock
    clock: Clock
    policy: PolicyConfig
    rng: random.Random
    probe: Probe = no_probe

    def jitter(self) -> int:
        return self.rng.randrange(self.policy.jitter_max_ms + 1)

    def new_tick(self) -> TickCache:
        return TickCache(self.plog)

    async def prefetch(self, tick: TickCache, items: list[Item]) -> None:
        """Read the quota counts of all of a tick's users at once."""
        now = self.clock.now_ms()
        await tick.prefetch((i.user_pk, local_day_start_ms(now, self.prefs(i).zone)) for i in items)

    def prefs(self, item: Item) -> UserPrefs:
        return user_prefs(item.timezone, item.settings, self.policy)

    async def process(self, item: Item, tick: TickCache | None = None) -> Outcome:
        """Run one claimed item; return its outcome for the tick report."""
        tick = tick or self.new_tick()
        await self.probe("claimed", item)
        now = self.clock.now_ms()
        prefs = self.prefs(item)
        counts = await tick.counts(
            item.user_pk, local_day_start_ms(now, prefs.zone), utc_day_start_ms(now)
        )
        candidate = Candidate(
            due_at=item.due_at,
            execute_at=item.execute_at,
            confidence=item.confidence,
            is_reminder=item.is_reminder,
            exact_time=item.exact_time,
        )
        verdict = decide(candidate, prefs, counts, now, self.policy, self.jitter())
        await self.probe("policy", item)
        if verdict.action is Action.EXPIRE:
            return await self._finish(item, ItemStatus.EXPIRED, verdict.reason)
        if verdict.action is Action.SKIP:
            return await self._finish(item, ItemStatus.SKIPPED, verdict.reason)
        if verdict.action is Action.RESCHEDULE:
            assert verdict.at_ms is not None
            return await self._reschedule(item, verdict.at_ms, verdict.reason)
        if item.chat_unreachable:
            return await self._finish(
                item, ItemStatus.FAILED, "the chat is unreachable (bot blocked?)"
            )
        async with self.chat_lock(item.chat.key):
            return await self._gate_and_send(item, prefs, counts, verdict, tick)

    async def _gate_and_send(
        self, item: Item, prefs: UserPrefs, counts: QuotaCounts, verdict: Verdict,
        tick: TickCache,
    ) -> Outcome:  # fmt: skip
        try:
            decision = await self._ask(item, prefs, counts, verdict, tick)
        except ModelNotConfigured:
            if not item.is_reminder:
                at = self.clock.now_ms() + NO_MODEL_RETRY_MS
                return await self._reschedule(item, at, "waiting: no model configured", False)
            decision = Decision("skip", reason="no model configured")
        except ModelUnavailable:
            if not item.is_reminder:
                at = self.clock.now_ms() + MODEL_DOWN_RETRY_MS
                return await self._reschedule(item, at, "waiting: model unavailable", False)
            decision = Decision("skip", reason="model unavailable")
        except ModelError as exc:
            if not item.is_reminder:
                return await self._finish(
                    item, ItemStatus.FAILED, f"gate failed: {type(exc).__name__}"
                )
            decision = Decision("skip", reason="model error")
        await self.probe("gated", item)
        if item.is_reminder and decision.action != "send":
            decision = Decision("send", message=reminder_text(item.what))
        if decision.action == "skip":
            note = "malformed decision, skipped: " if decision.malformed else "gate: "
            return await self._finish(item, ItemStatus.SKIPPED, note + decision.reason)
        if decision.action == "defer":
            at = next_allowed_ms(
                self.clock.now_ms() + int(decision.hours * HOUR_MS), prefs, self.jitter()
            )
            return await self._reschedule(item, at, f"gate deferred: {decision.reason}")
        late = f" (late by {verdict.late_ms // 60_000} min)" if verdict.late_ms else ""
        return await self._send(item, prefs, decision.message, "sent" + late, tick)

    async def _ask(
        self, item: Item, prefs: UserPrefs, counts: QuotaCounts, verdict: Verdict,
        tick: TickCache,
    ) -> Decision:  # fmt: skip
        prompt = meta_prompt(await self._context(item, prefs, counts, verdict, tick))
        response = await self.call_model(gate_request(prompt), item.chat.key)
        decision = parse_decision(response)
        if decision.malformed:
            log.warning("%s: gate answer not accepted: %s", item.key, decision.reason)
        return decision

    async def _context(
        self, item: Item, prefs: UserPrefs, counts: QuotaCounts, verdict: Verdict,
        tick: TickCache,
    ) -> GateContext:  # fmt: skip
        now = self.clock.now_ms()
        rate = await tick.engagement_rate(item.user_pk, now)
        # A group reads the message: the user's memories stay out of what it is written from.
        memories = [] if item.in_group else await tick.memories(item.user_pk, self._memories)
        recent = await self.store.recent_texts(item.chat_pk)
        if item.source == "intent":
            header = "[PROACTIVE FOLLOW-UP]"
            if item.is_reminder:
                header += " The user asked to be reminded; write the reminder."
            ago = f"You registered an intent {_ago(now - item.created_at)}"
        else:
            header = f"[PROACTIVE CHECK-IN] {TRIGGER_HEADERS.get(item.kind, item.kind)}."
            ago = f"Detected {_ago(now - item.created_at)}"
        limit = self.policy.per_user_daily
        return GateContext(
            header=header,
            what=item.what,
            why=item.why,
            ago=ago,
            user_name=item.user_name,
            channel=item.chat.channel,
            timezone=prefs.zone.key,
            local_time=f"{local(now, prefs.zone):%A %H:%M}",
            last_active=_ago(now - item.last_seen_ms),
            quota=f"{max(0, limit - counts.user_today)}/{limit} proactive messages today",
            engagement="no data yet" if rate is None else f"{rate:.0%} get replies",
            memories=memories,
            recent=[f"{role}: {text[:300]}" for role, text in recent],
            late=f"this runs {verdict.late_ms // 60_000} min late" if verdict.late_ms else "",
        )

    async def _memories(self, user: int) -> list[str]:
        return [m.text for m in await self.memories.listing(user, limit=8)]

    async def _send(
        self, item: Item, prefs: UserPrefs, text: str, reason: str, tick: TickCache
    ) -> Outcome:
        now = self.clock.now_ms()
        out = Outbound(
            chat=item.chat,
            text=text,
            idempotency_key=f"proactive:{item.source}:{item.id}",
            kind=OutboundKind.PROACTIVE,
        )
        quota = None
        if not item.is_reminder:
            quota = QuotaCheck(
                user_since_ms=local_day_start_ms(now, prefs.zone),
                user_limit=self.policy.per_user_daily,
                global_since_ms=utc_day_start_ms(now),
                global_limit=self.policy.global_daily,
            )
        try:
            outbox_id = await self.store.begin_delivery(item, out, now, quota)
        except LostClaim:
            log.warning("%s: claim lost before the send; another run owns it", item.key)
            return Outcome.LOST
        if outbox_id is None:  # another item took the last quota slot since the policy ran
            at = next_allowed_ms(now + HOUR_MS, prefs, self.jitter())
            return await self._reschedule(item, at, "quota reached while sending")
        tick.started(item.user_pk, now)
        await self.probe("delivering", item)
        status = await self.settle(item, outbox_id, out, reason)
        if status is Outcome.FAILED:
            tick.failed(item.user_pk, now)
        return status

    async def settle(self, item: Item, outbox_id: int, out: Outbound, reason: str) -> Outcome:
        """Send a `delivering` row's outbox message and record the outcome.

        A delivered message's terminal state and assistant turn commit in the same transaction
        that marks its outbox row `sent`; a failed or uncertain send is recorded afterwards.
        """

        def completed(raw: sqlite3.Connection) -> None:
            complete_in(raw, item, ItemStatus.SENT, reason, out.text, self.clock.now_ms())

        try:
            sent = await self.deliver(outbox_id, out, on_sent=completed)
            status = sent.status
        except DeliveryUncertain:
            status = DeliveryStatus.UNCERTAIN
        if status is DeliveryStatus.DUPLICATE:  # another run sends this row; reconciliation ends it
            return Outcome.LOST
        await self.probe("sent", item)
        ended = ItemStatus(status.value)  # sent, failed or uncertain: the same words
        if ended is not ItemStatus.SENT:
            reason = {"failed": "delivery failed", "uncertain": "delivery outcome unknown"}[status]
            await self.store.complete_delivery(item, ended, reason, out.text, self.clock.now_ms())
        return Outcome.ended(ended)

    async def _finish(self, item: Item, status: ItemStatus, reason: str) -> Outcome:
        if not await self.store.finish(item, status, reason, self.clock.now_ms()):
            return Outcome.LOST
        return Outcome.ended(status)

    async def _reschedule(
        self, item: Item, at_ms: int, reason: str, deferral: bool = True
    ) -> Outcome:
        if not await self.store.reschedule(item, at_ms, reason, deferral=deferral):
            return Outcome.LOST
        return Outcome.DEFERRED


def _ago(ms: int) -> str:
    minutes = max(0, ms) // 60_000
    if minutes < 60:
        return f"{minutes} min ago"
    if minutes < 48 * 60:
        return f"{minutes // 60} h ago"
    return f"{minutes // (24 * 60)} days ago"
