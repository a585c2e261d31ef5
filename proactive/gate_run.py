"""Asking the gate: one due item's meta-prompt, the tool loop, and the decision it ends with.

The model decides with full agency: the gate runs the agent's own tool loop
(`gateway/agent/loop.py`) with the tools marked `proactive` (memories, follow-ups, knowledge —
whatever their owners marked) beside the `proactive_decision` tool, and the loop ends when the
model calls it. If the model answers in text instead, an exact `[SKIP]`/`[DEFER Nh]` is taken
as it is; anything else gets one more round that forces the decision tool.

Tool calls run in the item's own scope — its user and chat, never an admin, a group chat
marked as one (memory search refuses there) — and each is recorded for the item
(`vault/proactive/gate_calls.py`) as soon as it ran, before the model's next answer: a crash,
a model outage or a defer after a tool call keeps its effect, `/why` shows it, and the next
attempt at the same item is told what was already done. The tools themselves do nothing
twice for a replayed call (a memory already kept, a follow-up already registered).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from gateway.agent.loop import ToolSet, run_tool_loop
from gateway.core.llm import LLMRequest, LLMResponse, Payer, ToolCall, ToolResult, ToolSpec
from gateway.core.messages import UserRef
from gateway.core.ports import Clock
from gateway.core.scope import Scope
from proactive.gate import (
    DECISION_TOOL,
    Decision,
    GateContext,
    decision_of,
    decision_round,
    exact_marker,
    gate_request,
    meta_prompt,
    parse_decision,
)
from proactive.policy import PolicyConfig, QuotaCounts, UserPrefs, Verdict, local
from proactive.tick import TickCache
from vault.memories import Memories
from vault.proactive.gate_calls import GateCall, GateCalls
from vault.proactive.store import Item, ProactiveStore

log = logging.getLogger(__name__)

ModelCall = Callable[[LLMRequest, str | None], Awaitable[LLMResponse]]
Probe = Callable[[str, Item], Awaitable[None]]
TRIGGER_HEADERS = {
    "dormant_user": "A passive scan noticed this user has gone quiet",
    "unanswered": "A passive scan noticed your question was never answered",
    "engagement_drop": "A passive scan noticed this user writes much less than usual",
    "external": "An external trigger asks you to consider reaching out",
}


class NoTools:
    """The tool set of an engine built without the app's tools (the decision tool only)."""

    def specs_for(self, scope: Scope) -> tuple[ToolSpec, ...]:
        return ()

    async def call(self, scope: Scope, call: ToolCall) -> ToolResult:
        return ToolResult(call.id, f"unknown tool: {call.name}", is_error=True)


@dataclass
class Asked:
    """What one gate run did: the tool calls made (names, in order) and, once known, the
    decision. Filled as the run goes, so a caller still sees the calls if the run fails."""

    tools_used: list[str] = field(default_factory=list)
    decision: Decision | None = None

    def note(self) -> str:
        """For an item's reason: the effects that stand whatever the decision was."""
        if not self.tools_used:
            return ""
        return f"{KEPT}{len(self.tools_used)} tool call(s) made while deciding: " \
               f"{', '.join(self.tools_used)})"  # fmt: skip


KEPT = " (kept the effects of "  # starts `Asked.note`: `/why` says it in words of its own


def item_label(source: str, item_id: int) -> str:
    return f"{'follow-up' if source == 'intent' else 'check-in'} #{item_id}"


def describe(call: GateCall) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in call.input.items())
    outcome = ("failed: " if call.is_error else "") + call.result
    return f"{call.tool}({args}) -> {outcome[:200]}"


@dataclass
class GateRunner:
    store: ProactiveStore
    memories: Memories
    call_model: ModelCall
    clock: Clock
    policy: PolicyConfig
    calls: GateCalls
    tools: ToolSet = field(default_factory=NoTools)
    max_rounds: int = 4

    async def ask(
        self, item: Item, prefs: UserPrefs, counts: QuotaCounts, verdict: Verdict,
        tick: TickCache, asked: Asked, probe: Probe,
    ) -> Decision:  # fmt: skip
        """The model's decision about `item`, after whatever tools it used (in `asked`)."""
        context = await self._context(item, prefs, counts, verdict, tick)
        scope = self._scope(item)
        request = gate_request(
            meta_prompt(context),
            self.tools.specs_for(scope),
            payer=Payer(user_pk=item.user_pk, timezone=item.timezone),
        )

        async def ask(req: LLMRequest) -> LLMResponse:
            return await self.call_model(req, item.chat.key)

        async def on_tool(call: ToolCall, result: ToolResult) -> None:
            asked.tools_used.append(call.name)
            await self.calls.record(
                source=item.source, item_id=item.id, user=item.user_pk, chat=item.chat_pk,
                tool=call.name, input=call.input, result=result.content,
                is_error=result.is_error, now_ms=self.clock.now_ms(),
            )  # fmt: skip
            await probe("gate_tool", item)

        end = await run_tool_loop(
            ask, self.tools, scope, request,
            max_rounds=self.max_rounds, final_tool=DECISION_TOOL, on_tool=on_tool,
        )  # fmt: skip
        if end.final is not None:
            decision = decision_of(end.final)
        elif end.stop == "refusal":
            decision = Decision("skip", reason="the model declined to decide")
        else:
            marker = exact_marker(end.response) if end.stop == "end_turn" else None
            if marker is None:  # prose, or the round cap: one round that forces the decision
                marker = parse_decision(await ask(decision_round(request, end.messages)))
            decision = marker
        if decision.malformed:
            log.warning("%s: gate answer not accepted: %s", item.key, decision.reason)
        asked.decision = decision
        return decision

    def _scope(self, item: Item) -> Scope:
        """The item's user and chat, as a turn of theirs would have it (never an admin's)."""
        return Scope(
            user=UserRef(channel=item.chat.channel, user_id=item.user_id),
            chat=item.chat,
            user_pk=item.user_pk,
            chat_pk=item.chat_pk,
            session_pk=0,
            message_pk=0,
            text="",
            now_ms=self.clock.now_ms(),
            timezone=item.timezone,
            in_group=item.in_group,
        )

    async def _context(
        self, item: Item, prefs: UserPrefs, counts: QuotaCounts, verdict: Verdict,
        tick: TickCache,
    ) -> GateContext:  # fmt: skip
        now, user = self.clock.now_ms(), item.user_pk
        # What the tick has not cached yet is read together (one hop); a group reads the
        # message, so the user's memories stay out of what it is written from; on its first
        # claim an item can have no earlier tool calls.
        reads: list[Awaitable[object]] = [self.store.recent_texts(item.chat_pk)]
        if item.attempts > 1:
            reads.append(self.calls.of_item(item.source, item.id))
        if not tick.rate_known(user):
            reads.append(tick.engagement_rate(user, now))
        if not item.in_group and not tick.memories_known(user):
            reads.append(tick.memories(user, self._memories))
        done = await asyncio.gather(*reads) if len(reads) > 1 else [await reads[0]]
        recent = cast(list[tuple[str, str]], done[0])
        earlier = cast(list[GateCall], done[1]) if item.attempts > 1 else []
        rate = await tick.engagement_rate(user, now)  # cached by now
        found = [] if item.in_group else await tick.memories(user, self._memories)
        if item.source == "intent":
            header = "[PROACTIVE FOLLOW-UP]"
            if item.is_reminder:
                header += " The user asked to be reminded; write the reminder."
            ago = f"You registered an intent {ago_text(now - item.created_at)}"
        else:
            header = f"[PROACTIVE CHECK-IN] {TRIGGER_HEADERS.get(item.kind, item.kind)}."
            ago = f"Detected {ago_text(now - item.created_at)}"
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
            last_active=ago_text(now - item.last_seen_ms),
            quota=f"{max(0, limit - counts.user_today)}/{limit} proactive messages today",
            engagement="no data yet" if rate is None else f"{rate:.0%} get replies",
            memories=found,
            recent=[f"{role}: {text[:300]}" for role, text in recent],
            late=f"this runs {verdict.late_ms // 60_000} min late" if verdict.late_ms else "",
            item=item_label(item.source, item.id),
            earlier=[describe(c) for c in earlier],
            in_group=item.in_group,
        )

    async def _memories(self, user: int) -> list[str]:
        return [m.text for m in await self.memories.listing(user, limit=8)]


def ago_text(ms: int) -> str:
    minutes = max(0, ms) // 60_000
    if minutes < 60:
        return f"{minutes} min ago"
    if minutes < 48 * 60:
        return f"{minutes // 60} h ago"
    return f"{minutes // (24 * 60)} days ago"
