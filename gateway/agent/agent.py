"""The agent: assemble context, call the model, run the tool loop, return the reply text.

The loop (`gateway/agent/loop.py`, shared with the proactive gate) appends the assistant's
content unchanged, answers every `tool_use` with a `tool_result` (`is_error` when it failed),
and stops on `end_turn`. `max_tokens` returns what was written with a note; `pause_turn`
continues; `refusal` returns a fixed text; the number of model rounds is capped. Every model
call is recorded (tokens, latency, success) for `/status` and the admin stats. The model port
may be None (no API key): then the agent raises `ModelNotConfigured` and the router tells the
user how to configure one.

Bounded waits: every model call waits at most `deadline_s` (`[llm] turn_deadline_seconds`), and
the rounds of one chat turn share that deadline — waiting for a free model slot
(`max_concurrency` calls at once), the adapter's retries and Retry-After waits all count. Past
it the call raises `ModelUnavailable` and the router answers with its apology. While a turn
waits on the model it steps out of its router slot (`gateway/core/slots.py`), so a slow model
never blocks other chats. Refused keys and successful calls are reported to `ModelHealth`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace

from gateway.agent.context import ContextPipeline, ContextTrace
from gateway.agent.loop import run_tool_loop
from gateway.agent.model_health import ModelHealth
from gateway.agent.tools import ToolRegistry
from gateway.agent.traces import TraceStore
from gateway.core.budget import CallGuard
from gateway.core.clock import SystemClock
from gateway.core.errors import (
    ModelError,
    ModelKeyRejected,
    ModelNotConfigured,
    ModelRejected,
    ModelUnavailable,
    VaultError,
)
from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse, Payer
from gateway.core.metrics import Metrics
from gateway.core.ports import LLM, Clock
from gateway.core.scope import Scope
from gateway.core.slots import TurnSlots
from vault.usage import Call, UsageLog

log = logging.getLogger(__name__)

REFUSAL_TEXT = "I can't help with that request."
CUT_SHORT_NOTE = "\n\n(My reply was cut short by the length limit.)"
TOO_MANY_ROUNDS = (
    "I had to stop: the request needed more tool steps than I'm allowed. Try a narrower request."
)
EMPTY_REPLY = "I have nothing to add to that."
# The hard bound around the adapter gives it this long past the deadline to raise its own,
# more precise error (rate limit, timeout) first.
BACKSTOP_GRACE_S = 0.25

COMPACT_INSTRUCTION = (
    "Summarize the conversation above for your own future reference: the user's goals, "
    "decisions made, facts learned, and open questions. Be concise (at most 200 words), "
    "plain text, no preamble."
)


def payer_of(scope: Scope) -> Payer:
    """The user whose budget a call made for this scope spends."""
    return Payer(user_pk=scope.user_pk, timezone=scope.timezone)


@dataclass(frozen=True, slots=True)
class AgentReply:
    text: str
    stop_reason: str
    rounds: int
    trace: ContextTrace | None = None


class Agent:
    def __init__(
        self,
        *,
        llm: LLM | None,
        model: str,
        pipeline: ContextPipeline,
        tools: ToolRegistry,
        usage: UsageLog,
        traces: TraceStore,
        max_tokens: int,
        max_rounds: int,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        deadline_s: float = 30.0,
        max_concurrency: int = 32,
        health: ModelHealth | None = None,
        turn_slots: TurnSlots | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.llm = llm
        self.model = model
        self.pipeline = pipeline
        self.tools = tools
        self.usage = usage
        self.traces = traces
        self.max_tokens = max_tokens
        self.max_rounds = max_rounds
        self.clock: Clock = clock or SystemClock()
        self.deadline_s = deadline_s
        self.health = health or ModelHealth()
        self.turn_slots = turn_slots
        self._model_slots = asyncio.Semaphore(max_concurrency)
        # Spending limits, when a feature contributes them (`gateway/limits/`).
        self.guard: CallGuard | None = None

    async def call(
        self, request: LLMRequest, chat_key: str | None, *, deadline_s: float | None = None
    ) -> LLMResponse:
        """One recorded model call, within `deadline_s` (at most the agent's deadline)."""
        if self.llm is None:
            raise ModelNotConfigured("no model configured")
        model = request.model or self.model
        hold = await self.guard.admit(request, model) if self.guard is not None else None
        started = time.perf_counter()
        ok = False
        response: LLMResponse | None = None
        try:
            response = await self._complete(request, deadline_s)
            ok = True
            return response
        finally:
            if hold is not None:
                hold.settle(response)
            seconds = time.perf_counter() - started
            latency = int(seconds * 1000)
            self.metrics.model_calls.inc(request.purpose, "ok" if ok else "error")
            self.metrics.model_latency.observe(seconds, request.purpose)
            if response is not None:
                self.metrics.model_tokens.observe(response.input_tokens, "input")
                self.metrics.model_tokens.observe(response.output_tokens, "output")
            call = Call(
                chat_key=chat_key,
                purpose=request.purpose,
                model=model,
                input_tokens=response.input_tokens if response else 0,
                output_tokens=response.output_tokens if response else 0,
                cache_read_tokens=response.cache_read_tokens if response else 0,
                cache_write_tokens=response.cache_write_tokens if response else 0,
                latency_ms=latency,
                ok=ok,
            )
            try:
                await self.usage.record(call, self.clock.now_ms())
            except VaultError:  # statistics must never replace the call's own outcome
                log.exception("could not record model usage")

    async def _complete(self, request: LLMRequest, deadline_s: float | None) -> LLMResponse:
        assert self.llm is not None
        budget = self.deadline_s if deadline_s is None else min(deadline_s, self.deadline_s)
        if budget <= 0:
            raise ModelUnavailable(f"the turn used up its model deadline ({self.deadline_s:g} s)")
        ends = time.monotonic() + budget
        asked = False  # past the wait for a model slot (`[llm] max_concurrency`)
        try:
            async with AsyncExitStack() as waiting:
                if self.turn_slots is not None:
                    await waiting.enter_async_context(self.turn_slots.stepped_out())
                async with asyncio.timeout(budget + BACKSTOP_GRACE_S), self._model_slots:
                    asked = True
                    left = ends - time.monotonic()
                    response = await self.llm.complete(replace(request, deadline_s=left))
        except TimeoutError:
            if not asked:  # this gateway's own queue, not the model: no health problem
                raise ModelUnavailable(
                    f"no model slot free within {budget:.3g} s ([llm] max_concurrency)"
                ) from None
            self.health.report_failed(self.clock.now_ms())
            raise ModelUnavailable(f"no answer from the model within {budget:.3g} s") from None
        except ModelKeyRejected:
            self.health.report_key_rejected(self.clock.now_ms())
            raise
        except ModelRejected as exc:
            self.health.report_refused(exc.status, self.clock.now_ms())
            raise
        except ModelUnavailable:
            self.health.report_failed(self.clock.now_ms())
            raise
        self.health.report_answered()
        return response

    async def respond(self, scope: Scope) -> AgentReply:
        if self.llm is None:
            raise ModelNotConfigured("no model configured")
        assembled = await self.pipeline.assemble(scope)
        self.traces.put(assembled.trace)
        request = LLMRequest(
            system_stable=assembled.system_stable,
            system_dynamic=assembled.system_dynamic,
            messages=tuple(assembled.messages),
            tools=await self.tools.offered_specs(scope),
            max_tokens=self.max_tokens,
            payer=payer_of(scope),
        )
        waited = 0.0  # the rounds share one deadline

        async def ask(request: LLMRequest) -> LLMResponse:
            nonlocal waited
            started = time.monotonic()
            try:
                return await self.call(request, scope.chat.key, deadline_s=self.deadline_s - waited)
            finally:
                waited += time.monotonic() - started

        # The same loop the proactive gate runs (`gateway/agent/loop.py`).
        end = await run_tool_loop(ask, self.tools, scope, request, max_rounds=self.max_rounds)
        if end.stop == "max_rounds":
            log.warning("tool loop for %s hit the cap of %d rounds", scope.chat.key, end.rounds)
            return AgentReply(TOO_MANY_ROUNDS, "max_rounds", end.rounds, assembled.trace)
        if end.stop == "refusal":
            return AgentReply(REFUSAL_TEXT, "refusal", end.rounds, assembled.trace)
        text = end.response.text or EMPTY_REPLY
        if end.stop == "max_tokens":
            text += CUT_SHORT_NOTE
        return AgentReply(text, end.stop, end.rounds, assembled.trace)

    async def summarize(self, scope: Scope, history: list[LLMMessage], previous: str | None) -> str:
        """A model-written summary of a session, for `/compact`."""
        messages = list(history)
        prefix = f"(Earlier summary: {previous})\n\n" if previous else ""
        messages.append(LLMMessage.user(prefix + COMPACT_INSTRUCTION))
        merged: list[LLMMessage] = []
        for message in messages:  # the API wants alternating roles, starting with the user
            if merged and merged[-1].role == message.role:
                merged[-1] = LLMMessage(message.role, merged[-1].parts + message.parts)
            elif merged or message.role == "user":
                merged.append(message)
        response = await self.call(
            LLMRequest(
                system_stable="You write faithful, compact conversation summaries.",
                messages=tuple(merged),
                max_tokens=min(self.max_tokens, 1024),
                purpose="compact",
                payer=payer_of(scope),
            ),
            scope.chat.key,
        )
        if not response.text:
            raise ModelError("empty summary")
        return response.text
