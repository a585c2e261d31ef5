"""The tool registry: tools the model may call, scoped by the gateway to the current turn.

A tool declares its arguments as a pydantic model; the registry derives the JSON schema the
model sees from it and validates every call against it. Whatever goes wrong — unknown tool,
invalid arguments, a `ToolError`, or a bug — becomes an `is_error` tool result, so the model
can recover and the turn goes on. Admin-only tools are offered only in admins' turns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.core.errors import ToolError
from gateway.core.llm import ToolCall, ToolResult, ToolSpec
from gateway.core.scope import Scope

log = logging.getLogger(__name__)

ToolHandler = Callable[[Scope, Any], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    handler: ToolHandler
    admin_only: bool = False

    def spec(self) -> ToolSpec:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(self.name, self.description, schema)


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._specs: dict[bool, tuple[ToolSpec, ...]] = {}

    def register(self, *tools: Tool) -> None:
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} registered twice")
            self._tools[tool.name] = tool
        # Built once: identical bytes every request keep the prompt-cache prefix valid.
        self._specs = {
            admin: tuple(t.spec() for t in self._tools.values() if admin or not t.admin_only)
            for admin in (False, True)
        }

    def specs_for(self, scope: Scope) -> tuple[ToolSpec, ...]:
        return self._specs.get(scope.is_admin, ())

    async def call(self, scope: Scope, call: ToolCall) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None or (tool.admin_only and not scope.is_admin):
            return ToolResult(call.id, f"unknown tool: {call.name}", is_error=True)
        try:
            args = tool.args.model_validate(call.input)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            return ToolResult(call.id, f"invalid arguments: {problems}", is_error=True)
        try:
            return ToolResult(call.id, await tool.handler(scope, args))
        except ToolError as exc:
            return ToolResult(call.id, str(exc), is_error=True)
        except Exception:
            log.exception("tool %s failed", call.name)
            return ToolResult(call.id, "the tool failed with an internal error", is_error=True)
