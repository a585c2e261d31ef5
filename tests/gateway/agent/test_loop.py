"""The tool loop on its own (`gateway/agent/loop.py`): a final tool ends it after the answer's
other calls ran, pauses continue, the cap holds; and the registry's proactive view offers and
runs only the tools marked for it."""

from __future__ import annotations

from pydantic import BaseModel

from gateway.agent.loop import run_tool_loop
from gateway.agent.tools import Tool, ToolRegistry
from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse, TextPart, ToolCall, ToolResult
from gateway.core.messages import ChatRef, UserRef
from gateway.core.scope import Scope

SCOPE = Scope(user=UserRef(channel="m", user_id="u"), chat=ChatRef(channel="m", chat_id="c"),
              user_pk=1, chat_pk=1, session_pk=0, message_pk=0, text="", now_ms=0)  # fmt: skip


class NoArgs(BaseModel):
    pass


def registry(ran: list[str]) -> ToolRegistry:
    async def note(scope: Scope, args: NoArgs) -> str:
        ran.append("note")
        return "noted"

    async def wipe(scope: Scope, args: NoArgs) -> str:
        ran.append("wipe")
        return "wiped"

    tools = ToolRegistry()
    tools.register(Tool("note", "Note it.", NoArgs, note, proactive=True),
                   Tool("wipe", "Wipe it.", NoArgs, wipe))  # fmt: skip
    return tools


def answer(*parts: TextPart | ToolCall, stop: str = "tool_use") -> LLMResponse:
    return LLMResponse(parts=parts, stop_reason=stop, model="fake")


class Script:
    def __init__(self, *answers: LLMResponse) -> None:
        self.answers = list(answers)
        self.seen: list[LLMRequest] = []

    async def __call__(self, request: LLMRequest) -> LLMResponse:
        self.seen.append(request)
        return self.answers.pop(0)


REQUEST = LLMRequest(system_stable="s", messages=(LLMMessage.user("go"),))


async def test_a_final_tool_ends_the_loop_after_the_other_calls_of_its_answer() -> None:
    ran: list[str] = []
    observed: list[tuple[str, ToolResult]] = []

    async def observe(call: ToolCall, result: ToolResult) -> None:
        observed.append((call.name, result))

    ask = Script(
        answer(ToolCall("1", "note", {})),
        answer(ToolCall("2", "note", {}), ToolCall("3", "decide", {"x": 1})),
    )
    end = await run_tool_loop(ask, registry(ran), SCOPE, REQUEST, max_rounds=5,
                              final_tool="decide", on_tool=observe)  # fmt: skip
    assert (end.stop, end.rounds) == ("final", 2)
    assert end.final is not None and end.final.input == {"x": 1}
    assert ran == ["note", "note"]
    assert [(name, r.content) for name, r in observed] == [("note", "noted"), ("note", "noted")]
    second = ask.seen[1].messages  # the first round's result went back to the model
    assert isinstance(second[-1].parts[0], ToolResult)


async def test_pause_continues_text_ends_and_the_cap_holds() -> None:
    ran: list[str] = []
    ask = Script(
        answer(TextPart("thinking"), stop="pause_turn"),
        answer(TextPart("done"), stop="end_turn"),
    )
    end = await run_tool_loop(ask, registry(ran), SCOPE, REQUEST, max_rounds=5)
    assert (end.stop, end.rounds, end.response.text) == ("end_turn", 2, "done")
    assert [m.role for m in end.messages] == ["user", "assistant", "assistant"]
    looping = Script(*(answer(ToolCall(str(n), "note", {})) for n in range(3)))
    capped = await run_tool_loop(looping, registry(ran), SCOPE, REQUEST, max_rounds=3,
                                 final_tool="decide")  # fmt: skip
    assert (capped.stop, capped.rounds, capped.final) == ("max_rounds", 3, None)
    assert capped.messages[-1].role == "user"  # ends with the last round's results


async def test_the_proactive_view_offers_and_runs_only_marked_tools() -> None:
    ran: list[str] = []
    tools = registry(ran)
    view = tools.proactive()
    assert [s.name for s in view.specs_for(SCOPE)] == ["note"]
    assert {s.name for s in tools.specs_for(SCOPE)} == {"note", "wipe"}
    refused = await view.call(SCOPE, ToolCall("1", "wipe", {}))
    assert refused.is_error and refused.content == "unknown tool: wipe"
    assert (await view.call(SCOPE, ToolCall("2", "note", {}))).content == "noted"
    assert ran == ["note"]
