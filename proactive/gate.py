"""The gate: before anything proactive is sent, the model decides — send, skip or defer.

The model gets the meta-prompt built here and the tools that make sense with no user present
(`Tool.proactive`: memories, follow-ups, knowledge), runs them through the normal tool loop
(`gateway/agent/loop.py`), and ends with a `proactive_decision` tool call. When it answers
without one, one more round forces the decision tool (`decision_round`). A plain-text `[SKIP]`
or `[DEFER Nh]` is tolerated only when it is the *whole* reply; any other text, and any
"message" that itself looks like a control marker, is treated as a skip and logged, so a marker
(or the model thinking aloud) can never reach a user. The meta-prompt is not stored in the
conversation; only the message that is finally sent becomes an assistant turn.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import BaseModel, ValidationError

from gateway.core.llm import (
    LLMMessage,
    LLMRequest,
    LLMResponse,
    Payer,
    TextPart,
    ToolCall,
    ToolSpec,
)

log = logging.getLogger(__name__)

DECISION_TOOL = "proactive_decision"
MAX_DEFER_HOURS = 72.0
MAX_MESSAGE_CHARS = 2000

GATE_SYSTEM = (
    "You are Iris, deciding whether to send a proactive message that nobody asked for right "
    "now. Be conservative: follow up only if it is genuinely useful to the user today. "
    "Before deciding you may use your tools (look up or remember facts about the user, "
    "register or cancel follow-ups); what they do is kept whatever you decide. "
    "End by calling the proactive_decision tool: action 'send' with the exact message to send "
    "(written to the user, natural, short, no control markers), 'skip' with a reason, or "
    "'defer' with a number of hours."
)
DECIDE_NOW = "Decide now: call the proactive_decision tool (send, skip or defer)."

_EXACT_SKIP = re.compile(r"\[SKIP\]")
_EXACT_DEFER = re.compile(r"\[DEFER (\d{1,3}(?:\.\d+)?)h\]")
# Anything resembling a control token: bracketed upper-case words, or known peer markers.
_MARKERISH = re.compile(
    r"\[\s*/?\s*(?:SKIP|DEFER|SILENT|NO_?REPLY|HEARTBEAT|PROACTIVE)[^\]]*\]?"
    r"|(?-i:\[[A-Z][A-Z_]{2,}(?:[ :][^\]]*)?\])|HEARTBEAT_OK|NO_REPLY",
    re.IGNORECASE,
)


class _DecisionArgs(BaseModel):
    action: Literal["send", "skip", "defer"]
    message: str = ""
    reason: str = ""
    hours: float = 0.0  # out of range (negative too) is kept in range by `_defer`


DECISION_SPEC = ToolSpec(
    DECISION_TOOL,
    "Decide about this proactive follow-up: send(message), skip(reason) or defer(hours).",
    {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["send", "skip", "defer"]},
            "message": {"type": "string", "description": "for send: the text the user gets"},
            "reason": {"type": "string", "description": "for skip/defer: why"},
            "hours": {"type": "number", "description": f"for defer: 0.25..{MAX_DEFER_HOURS:g}"},
        },
        "required": ["action"],
    },
)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Literal["send", "skip", "defer"]
    message: str = ""
    reason: str = ""
    hours: float = 0.0
    malformed: bool = False  # the model did not answer in a form we accept


@dataclass(frozen=True, slots=True, kw_only=True)
class GateContext:
    """Everything the meta-prompt shows the model."""

    header: str  # "[PROACTIVE FOLLOW-UP]" plus what the item is
    what: str
    why: str
    ago: str
    user_name: str
    channel: str
    timezone: str
    local_time: str
    last_active: str
    quota: str
    engagement: str
    memories: list[str]
    recent: list[str]
    late: str = ""
    item: str = ""  # "follow-up #12", "check-in #4": the id /why and the tools use
    # Tool calls an earlier attempt at this same decision already made (their effects stand).
    earlier: list[str] = field(default_factory=list)
    in_group: bool = False


def meta_prompt(ctx: GateContext) -> str:
    memories = "\n".join(f"- {m}" for m in ctx.memories) or "- (none)"
    recent = "\n".join(ctx.recent) or "(no recent messages)"
    late = f"\nNote: {ctx.late}." if ctx.late else ""
    item = f" ({ctx.item})" if ctx.item else ""
    earlier = ""
    if ctx.earlier:
        earlier = (
            "\nEarlier attempts at this decision (interrupted or deferred) already made these "
            "tool calls; their effects are kept, do not repeat them:\n"
            + "\n".join(f"- {line}" for line in ctx.earlier)
            + "\n"
        )
    group = (
        "\nThis is a group chat: others read the message, so keep the user's private facts "
        "out of it.\n"
        if ctx.in_group
        else ""
    )
    return (
        f"{ctx.header}{item}\n"
        f'{ctx.ago}: "{ctx.what}"\n'
        f'Reason: "{ctx.why}"{late}\n\n'
        f"User: {ctx.user_name} ({ctx.channel})\n"
        f"Timezone: {ctx.timezone} (current local: {ctx.local_time})\n"
        f"Last active: {ctx.last_active}\n"
        f"Your quota: {ctx.quota}\n"
        f"Your engagement rate: {ctx.engagement}\n\n"
        f"Recent memories about this user:\n{memories}\n\n"
        f"Recent conversation:\n{recent}\n{group}{earlier}\n"
        "Use your tools if they help, then decide with the proactive_decision tool: send "
        "(with the message), skip, or defer."
    )


def gate_request(
    prompt: str,
    tools: tuple[ToolSpec, ...] = (),
    *,
    payer: Payer | None = None,
    model: str | None = None,
) -> LLMRequest:
    """The gate's first request: `tools` beside the decision tool (which is forced when there
    are no others)."""
    return LLMRequest(
        system_stable=GATE_SYSTEM,
        messages=(LLMMessage.user(prompt),),
        tools=(*tools, DECISION_SPEC),
        tool_choice=None if tools else DECISION_TOOL,
        max_tokens=1024,
        model=model,
        purpose="proactive_gate",
        payer=payer,
    )


def decision_round(request: LLMRequest, messages: tuple[LLMMessage, ...]) -> LLMRequest:
    """One more round after `messages` (ending with the model's answer or tool results) that
    forces the decision tool."""
    last = messages[-1]
    if last.role == "user":  # tool results: the instruction joins them (roles alternate)
        history = (*messages[:-1], LLMMessage("user", (*last.parts, TextPart(DECIDE_NOW))))
    else:
        history = (*messages, LLMMessage.user(DECIDE_NOW))
    return replace(request, messages=history, tool_choice=DECISION_TOOL)


def looks_like_marker(text: str) -> bool:
    return bool(_MARKERISH.search(text))


def reminder_text(what: str) -> str:
    """The fallback text of a user reminder; marker-like tokens in it are removed too."""
    cleaned = " ".join(_MARKERISH.sub(" ", what).split())
    return f"Reminder: {cleaned}" if cleaned else "Reminder: you asked me to remind you now."


def decision_of(call: ToolCall) -> Decision:
    """A `proactive_decision` call as a `Decision` (a malformed skip if its arguments are)."""
    return _from_tool(call.input)


def exact_marker(response: LLMResponse) -> Decision | None:
    """The decision of a reply that is exactly `[SKIP]` or `[DEFER Nh]`, else None."""
    text = response.text.strip()
    if _EXACT_SKIP.fullmatch(text):
        return Decision("skip", reason="model answered [SKIP]")
    defer = _EXACT_DEFER.fullmatch(text)
    if defer:
        return _defer(float(defer.group(1)), "model answered " + text)
    return None


def parse_decision(response: LLMResponse) -> Decision:
    """The model's answer as a `Decision`; anything unclear becomes a (malformed) skip."""
    for call in response.tool_calls:
        if call.name == DECISION_TOOL:
            return _from_tool(call.input)
    marker = exact_marker(response)
    if marker is not None:
        return marker
    text = response.text.strip()
    log.warning("gate: no decision tool call (%d chars of text); treated as skip", len(text))
    kind = "a malformed marker" if looks_like_marker(text) else "text without a decision"
    return Decision("skip", reason=f"model gave {kind}", malformed=True)


def _from_tool(raw: dict[str, object]) -> Decision:
    try:
        args = _DecisionArgs.model_validate(raw)
    except ValidationError:
        log.warning("gate: invalid proactive_decision arguments; treated as skip")
        return Decision("skip", reason="invalid decision arguments", malformed=True)
    if args.action == "skip":
        return Decision("skip", reason=args.reason[:300] or "model decided to skip")
    if args.action == "defer":
        return _defer(args.hours, args.reason[:300] or "model deferred")
    message = args.message.strip()
    if not message or looks_like_marker(message) or len(message) > MAX_MESSAGE_CHARS:
        log.warning("gate: unusable message (%d chars); treated as skip", len(message))
        return Decision("skip", reason="message empty, too long or marker-like", malformed=True)
    return Decision("send", message=message)


def _defer(hours: float, reason: str) -> Decision:
    if math.isnan(hours):
        return Decision("skip", reason="defer without a number of hours", malformed=True)
    if not 0.25 <= hours <= MAX_DEFER_HOURS:  # "later" is clear: a defer never drops the item
        kept = min(max(hours, 0.25), MAX_DEFER_HOURS)
        return Decision(
            "defer", reason=f"{reason} ({hours:g} h asked, {kept:g} h kept)", hours=kept
        )
    return Decision("defer", reason=reason, hours=hours)
