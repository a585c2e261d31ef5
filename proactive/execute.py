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
"Reminder: …" text; the gate's decision to skip can't suppress a reminder either. A gate call
refused by a spending limit (`[limits]`) skips an AI follow-up with the limit as its reason,
and sends a reminder as that plain text.

The gate itself — the meta-prompt, the tool loop and the decision — is `proactive/gate_run.py`;
tool calls it made stand whatever the decision, and a skip or defer says so in its reason.
Spacing is enforced like the quota: by the policy from the tick's counts, and again inside the
`delivering` transaction (`Blocked`). Random draws (the jitter of a deferral, the user's place
in the release window) are keyed hashes of a salt drawn once from `rng`, the item and its
attempt: the same for a seed whatever order items run in.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from gateway.agent.loop import ToolSet
from gateway.core.errors import (
    DeliveryUncertain,
    ModelError,
    ModelNotConfigured,
    ModelUnavailable,
    OverBudget,
)
from gateway.core.messages import Outbound, OutboundKind
from gateway.core.ports import Clock
from gateway.turns.delivery import DeliveryStatus
from proactive.gate import Decision, reminder_text
from proactive.gate_run import Asked, GateRunner, ModelCall, NoTools, Probe
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
    local_day_start_ms,
    mix64,
    next_allowed_ms,
    user_prefs,
    utc_day_start_ms,
)
from proactive.tick import TickCache
from vault.batch import SyncBody
from vault.memories import Memories
from vault.proactive.gate_calls import GateCalls
from vault.proactive.log import ProactiveLog
from vault.proactive.store import (
    Blocked,
    Item,
    ItemStatus,
    LostClaim,
    ProactiveStore,
    QuotaCheck,
)
from vault.proactive.tx import complete_in

log = logging.getLogger(__name__)

NO_MODEL_RETRY_MS = HOUR_MS
MODEL_DOWN_RETRY_MS = 15 * 60_000
ChatLock = Callable[[str], AbstractAsyncContextManager[None]]


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


def item_id_key(item: Item) -> int:
    """An item's key for the keyed draws: its id and its table."""
    return item.id << 1 ^ (item.source == "intent")


def user_pk_key(item: Item) -> int:
    """An item's user's key for the keyed draws: their id."""
    return item.user_pk


async def no_probe(step: str, item: Item) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Judged:
    """A claimed item with the policy's verdict and what it was reached from."""

    item: Item
    prefs: UserPrefs
    counts: QuotaCounts
    verdict: Verdict

    @property
    def sends(self) -> bool:
        """May lead to a send (the gate runs): the user's next items must wait for it."""
        return self.verdict.action is Action.PROCEED and not self.item.chat_unreachable


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
    # The tools the gate offers besides its decision (`ToolRegistry.proactive()` in the app).
    tools: ToolSet = field(default_factory=NoTools)
    gate_max_rounds: int = 4
    # What the keyed draws take an item and its user by: their ids here; the simulator keys
    # them by names that do not depend on other users' rows, so a shard of its population
    # draws what the whole population would.
    item_key: Callable[[Item], int] = item_id_key
    user_key: Callable[[Item], int] = user_pk_key

    def __post_init__(self) -> None:
        self._salt = self.rng.getrandbits(64)
        self.gate = GateRunner(
            store=self.store, memories=self.memories, call_model=self.call_model,
            clock=self.clock, policy=self.policy, calls=GateCalls(self.store.vault),
            tools=self.tools, max_rounds=self.gate_max_rounds,
        )  # fmt: skip

    def jitter(self, item: Item) -> int:
        """The jitter added to this attempt's deferral (keyed: order-independent)."""
        draw = mix64(self._salt ^ self.item_key(item) ^ item.attempts << 48)
        return draw % (self.policy.jitter_max_ms + 1)

    def new_tick(self) -> TickCache:
        return TickCache(self.plog)

    def _since(self, now: int, prefs: UserPrefs) -> int:
        """How far back a user's sends matter: their local day, and the spacing window."""
        return min(local_day_start_ms(now, prefs.zone), now - self.policy.min_spacing_ms)

    async def prefetch(self, tick: TickCache, items: list[Item]) -> None:
        """Read the quota counts of all of a tick's users, and everyone's, at once."""
        now = self.clock.now_ms()
        await asyncio.gather(  # one read hop
            tick.prefetch((i.user_pk, self._since(now, self.prefs(i, tick))) for i in items),
            tick.global_today(utc_day_start_ms(now)),
        )

    async def global_contended(self, tick: TickCache, items: list[Item], now: int) -> bool:
        """Could these items use up what is left of the global quota? Then which of them gets
        the last slot depends on the order they run in (the engine runs them one by one)."""
        gated = sum(1 for i in items if not i.is_reminder)
        if not gated:
            return False
        used = await tick.global_today(utc_day_start_ms(now))
        return used + gated > self.policy.global_daily

    def prefs(self, item: Item, tick: TickCache | None = None) -> UserPrefs:
        """The item's user's settings for the policy (once per user and tick: a tick's items
        were read together, so one user's carry the same zone and settings)."""
        known = tick.prefs.get(item.user_pk) if tick is not None else None
        if known is None:
            known = user_prefs(item.timezone, item.settings, self.policy,
                               release_key=mix64(self._salt, self.user_key(item)))  # fmt: skip
            if tick is not None:
                tick.prefs[item.user_pk] = known
        return known

    async def process(self, item: Item, tick: TickCache | None = None) -> Outcome:
        """Run one claimed item; return its outcome for the tick report."""
        tick = tick or self.new_tick()
        return await self.act(await self.judge(item, tick), tick)

    async def judge(self, item: Item, tick: TickCache) -> Judged:
        """The policy's verdict on a claimed item (no writes)."""
        await self.probe("claimed", item)
        now = self.clock.now_ms()
        prefs = self.prefs(item, tick)
        counts = await tick.counts(
            item.user_pk,
            day_start_ms=local_day_start_ms(now, prefs.zone),
            since_ms=self._since(now, prefs),
            global_since_ms=utc_day_start_ms(now),
        )
        candidate = Candidate(
            due_at=item.due_at,
            execute_at=item.execute_at,
            confidence=item.confidence,
            is_reminder=item.is_reminder,
            exact_time=item.exact_time,
        )
        verdict = decide(candidate, prefs, counts, now, self.policy, self.jitter(item))
        await self.probe("policy", item)
        return Judged(item, prefs, counts, verdict)

    async def act(self, judged: Judged, tick: TickCache) -> Outcome:
        """What the verdict says: a terminal state, a reschedule, or the gate and the send."""
        item, verdict = judged.item, judged.verdict
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
            return await self._gate_and_send(item, judged.prefs, judged.counts, verdict, tick)

    async def _gate_and_send(
        self, item: Item, prefs: UserPrefs, counts: QuotaCounts, verdict: Verdict,
        tick: TickCache,
    ) -> Outcome:  # fmt: skip
        asked = Asked()
        try:
            decision = await self.gate.ask(item, prefs, counts, verdict, tick, asked, self.probe)
        except OverBudget as exc:  # a reminder needs no model: it goes out as plain text
            if not item.is_reminder:
                return await self._finish(item, ItemStatus.SKIPPED, f"over budget: {exc.limit}")
            decision = Decision("skip", reason="over budget")
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
            return await self._finish(
                item, ItemStatus.SKIPPED, note + decision.reason + asked.note()
            )
        if decision.action == "defer":
            at = next_allowed_ms(
                self.clock.now_ms() + int(decision.hours * HOUR_MS), prefs, self.jitter(item)
            )
            reason = f"gate deferred: {decision.reason}{asked.note()}"
            return await self._reschedule(item, at, reason)
        late = f" (late by {verdict.late_ms // 60_000} min)" if verdict.late_ms else ""
        return await self._send(item, prefs, decision.message, "sent" + late, tick)

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
        if not item.is_reminder:  # reminders: no quota, no spacing
            quota = QuotaCheck(
                user_since_ms=local_day_start_ms(now, prefs.zone),
                user_limit=self.policy.per_user_daily,
                global_since_ms=utc_day_start_ms(now),
                global_limit=self.policy.global_daily,
                spacing_ms=self.policy.min_spacing_ms,
            )
        try:
            outbox_id = await self.store.begin_delivery(item, out, now, quota)
        except LostClaim:
            log.warning("%s: claim lost before the send; another run owns it", item.key)
            return Outcome.LOST
        if isinstance(outbox_id, Blocked):  # another item got there since the policy ran
            if outbox_id.reason == "spacing":
                at = next_allowed_ms(outbox_id.last_send_ms + self.policy.min_spacing_ms, prefs, 0)
                return await self._reschedule(item, at, "spacing reached while sending")
            at = next_allowed_ms(now + HOUR_MS, prefs, self.jitter(item))
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
