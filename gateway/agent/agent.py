"""The agent: assemble context, call the model, run the tool loop, return the reply text.

The loop appends the assistant's content unchanged, answers every `tool_use` with a
`tool_result` (`is_error` when it failed), and stops on `end_turn`. `max_tokens` returns what
was written with a note; `pause_turn` continues; `refusal` returns a fixed text; the number of
model rounds is capped. Every model call is recorded (tokens, latency, success) for `/status`
and the admin stats. The model port may be None (no API key): then the agent raises
`ModelNotConfigured` and the router tells the user how to configure one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from gateway.agent.context import ContextPipeline, ContextTrace, TraceStore
from gateway.agent.tools import ToolRegistry
from gateway.core.clock import SystemClock
from gateway.core.errors import ModelError, ModelNotConfigured, VaultError
from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse
from gateway.core.metrics import Metrics
from gateway.core.ports import LLM, Clock
from gateway.core.scope import Scope
from vault.usage import Call, UsageLog

log = logging.getLogger(__name__)

REFUSAL_TEXT = "I can't help with that request."
CUT_SHORT_NOTE = "\n\n(My reply was cut short by the length limit.)"
TOO_MANY_ROUNDS = (
    "I had to stop: the request needed more tool steps than I'm allowed. Try a narrower request."
)
EMPTY_REPLY = "I have nothing to add to that."

COMPACT_INSTRUCTION = (
    "Summarize the conversation above for your own future reference: the user's goals, "
    "decisions made, facts learned, and open questions. Be concise (at most 200 words), "
    "plain text, no preamble."
)


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

    async def call(self, request: LLMRequest, chat_key: str | None) -> LLMResponse:
        """One recorded model call."""
        if self.llm is None:
            raise ModelNotConfigured("no model configured")
        started = time.perf_counter()
        ok = False
        response: LLMResponse | None = None
        try:
            response = await self.llm.complete(request)
            ok = True
            return response
        finally:
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
                model=request.model or self.model,
                input_tokens=response.input_tokens if response else 0,
                output_tokens=response.output_tokens if response else 0,
                latency_ms=latency,
                ok=ok,
            )
            try:
                await self.usage.record(call, self.clock.now_ms())
            except VaultError:  # statistics must never replace the call's own outcome
                log.exception("could not record model usage")

    async def respond(self, scope: Scope) -> AgentReply:
        if self.llm is None:
            raise ModelNotConfigured("no model configured")
        assembled = await self.pipeline.assemble(scope)
        self.traces.put(assembled.trace)
        messages = list(assembled.messages)
        tools = self.tools.specs_for(scope)
        for round_no in range(1, self.max_rounds + 1):
            request = LLMRequest(
                system_stable=assembled.system_stable,
                system_dynamic=assembled.system_dynamic,
                messages=tuple(messages),
                tools=tools,
                max_tokens=self.max_tokens,
            )
            response = await self.call(request, scope.chat.key)
            if response.stop_reason == "tool_use" and response.tool_calls:
                messages.append(LLMMessage("assistant", response.parts))
                results = [await self.tools.call(scope, c) for c in response.tool_calls]
                messages.append(LLMMessage("user", tuple(results)))
                continue
            if response.stop_reason == "pause_turn":
                messages.append(LLMMessage("assistant", response.parts))
                continue
            if response.stop_reason == "refusal":
                return AgentReply(REFUSAL_TEXT, "refusal", round_no, assembled.trace)
            text = response.text or EMPTY_REPLY
            if response.stop_reason == "max_tokens":
                text += CUT_SHORT_NOTE
            return AgentReply(text, response.stop_reason, round_no, assembled.trace)
        log.warning("tool loop for %s hit the cap of %d rounds", scope.chat.key, self.max_rounds)
        return AgentReply(TOO_MANY_ROUNDS, "max_rounds", self.max_rounds, assembled.trace)

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
            ),
            scope.chat.key,
        )
        if not response.text:
            raise ModelError("empty summary")
        return response.text
