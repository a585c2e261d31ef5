"""Model-neutral request and response types. The Anthropic adapter translates them at the edge.

The agent's tool loop, the gate of the proactive engine and the analyzer's confirmation all
speak these types, so tests can fake the model at the port (or, one level lower, at the HTTP
transport of the real adapter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    tool_use_id: str
    content: str
    is_error: bool = False


Part = TextPart | ToolCall | ToolResult


@dataclass(frozen=True, slots=True)
class LLMMessage:
    role: Literal["user", "assistant"]
    parts: tuple[Part, ...]

    @classmethod
    def user(cls, text: str) -> LLMMessage:
        return cls("user", (TextPart(text),))

    @classmethod
    def assistant(cls, text: str) -> LLMMessage:
        return cls("assistant", (TextPart(text),))


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Payer:
    """Whose budget a model call spends: the user a turn, a compaction, a proactive gate or an
    analyzer confirmation runs for. The gateway sets it; the model adapter ignores it."""

    user_pk: int
    timezone: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMRequest:
    # `system_stable` is the cacheable prefix (persona, instructions): keep it byte-identical
    # between requests. Anything that changes per request goes into `system_dynamic`.
    system_stable: str
    system_dynamic: str = ""
    messages: tuple[LLMMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 1024
    model: str | None = None
    purpose: str = "chat"
    tool_choice: str | None = None  # force one tool by name
    payer: Payer | None = None  # None: no user's budget (only the global one applies)
    # The most this call may take, retries and Retry-After waits included (`Agent.call` sets
    # it from `[llm] turn_deadline_seconds`); None leaves it to the adapter's own bound.
    deadline_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMResponse:
    parts: tuple[Part, ...]
    stop_reason: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart)).strip()

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [p for p in self.parts if isinstance(p, ToolCall)]
