"""The tool loop: ask the model, run the tools it calls, and ask again until it answers.

One loop serves both callers that let the model act: the chat turn (`Agent.respond`) and the
proactive gate (`proactive/execute.py`), which ends the loop with a structured decision — a
`final_tool` whose call stops the loop instead of being run. The loop appends the
assistant's content unchanged and answers every `tool_use` with a `tool_result` (`is_error`
when it failed); `pause_turn` continues; anything else ends it, and so does the round cap.
What a stop means (a refusal text, a cut-short note, a decision) is the caller's business.

How the model is asked is the caller's too (`ask`): the agent shares one deadline between the
rounds of a turn, the gate records its calls under its own purpose. `on_tool` sees every tool
call and its result as soon as it ran, so a caller can record effects before the model's next
answer — which may never come.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse, ToolCall, ToolResult, ToolSpec
from gateway.core.scope import Scope

Ask = Callable[[LLMRequest], Awaitable[LLMResponse]]
ToolObserver = Callable[[ToolCall, ToolResult], Awaitable[None]]


class ToolSet(Protocol):
    """The tools a loop may run: `ToolRegistry`, or a view of it (`ToolRegistry.proactive`)."""

    def specs_for(self, scope: Scope) -> tuple[ToolSpec, ...]: ...

    async def call(self, scope: Scope, call: ToolCall) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class LoopEnd:
    response: LLMResponse  # the model's last answer
    # Its stop reason; "final" when `final_tool` ended the loop; "max_rounds" at the cap.
    stop: str
    rounds: int
    messages: tuple[LLMMessage, ...]  # the conversation, the last answer included
    final: ToolCall | None = None


async def run_tool_loop(
    ask: Ask,
    tools: ToolSet,
    scope: Scope,
    request: LLMRequest,
    *,
    max_rounds: int,
    final_tool: str | None = None,
    on_tool: ToolObserver | None = None,
) -> LoopEnd:
    """Run `request` (its `messages` are the start) until the model answers or calls
    `final_tool`; the other calls of that last answer still run first."""
    messages = list(request.messages)
    response: LLMResponse | None = None
    for round_no in range(1, max_rounds + 1):
        asked = request if round_no == 1 else replace(request, messages=tuple(messages))
        response = await ask(asked)
        calls = response.tool_calls
        final = None
        if final_tool is not None:
            final = next((c for c in calls if c.name == final_tool), None)
            if final is not None and len(calls) == 1:  # decided at once: nothing to run
                messages.append(LLMMessage("assistant", response.parts))
                return LoopEnd(response, "final", round_no, tuple(messages), final)
        if calls and (final is not None or response.stop_reason == "tool_use"):
            messages.append(LLMMessage("assistant", response.parts))
            results = []
            for call in calls:
                if call is final:
                    continue
                result = await tools.call(scope, call)
                if on_tool is not None:
                    await on_tool(call, result)
                results.append(result)
            if final is not None:
                return LoopEnd(response, "final", round_no, tuple(messages), final)
            messages.append(LLMMessage("user", tuple(results)))
            continue
        messages.append(LLMMessage("assistant", response.parts))
        if response.stop_reason == "pause_turn":
            continue
        return LoopEnd(response, response.stop_reason, round_no, tuple(messages))
    assert response is not None, "max_rounds must be at least 1"
    return LoopEnd(response, "max_rounds", max_rounds, tuple(messages))
