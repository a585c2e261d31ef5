"""The tool registry: tools the model may call, scoped by the gateway to the current turn.

A tool declares its arguments as a pydantic model; the registry derives the JSON schema the
model sees from it and validates every call against it. Whatever goes wrong — unknown tool,
invalid arguments, a `ToolError`, or a bug — becomes an `is_error` tool result, so the model
can recover and the turn goes on. Admin-only tools are offered only in admins' turns.

A tool may say when it is worth offering (`offered`, e.g. document search only once documents
are indexed): every tool offered costs the request its schema (the SDK copies and encodes it,
the model reads it). `offered_specs` asks those predicates for the turn; the same set of tools
always gives the same tuple of specs, so the bytes of the cached prompt prefix stay identical,
and the set only changes when a predicate's answer does (documents indexed, a first memory):
predicates should answer from state that changes that rarely. A tool not offered still answers
if the model calls it.

Every call of an admin-only tool — done, failed or refused — goes to `audited` (the app wires it
to the audit log), as an admin's `/admin` command or API request does: the model acting for an
admin is an admin action too.

A tool marked `proactive` is also offered to the proactive gate (`ToolRegistry.proactive`),
where the model decides about a follow-up with no user present: the tool's owner marks what
makes sense then (remembering, follow-ups, knowledge), the gate offers nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.core.errors import ToolError
from gateway.core.llm import ToolCall, ToolResult, ToolSpec
from gateway.core.scope import Scope

log = logging.getLogger(__name__)

ToolHandler = Callable[[Scope, Any], Awaitable[str]]
Offered = Callable[[Scope], Awaitable[bool]]
# (scope, tool name, the call's arguments, outcome "ok" | "error" | "refused", a short result)
Audited = Callable[[Scope, str, dict[str, Any], str, str], Awaitable[None]]


async def _not_audited(
    scope: Scope, name: str, args: dict[str, Any], outcome: str, result: str
) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    handler: ToolHandler
    admin_only: bool = False
    proactive: bool = False  # also offered to the proactive gate
    # Whether to offer it in this turn (None: always); asked by `offered_specs`.
    offered: Offered | None = field(default=None, compare=False)

    def spec(self) -> ToolSpec:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(self.name, self.description, schema)


class ToolRegistry:
    def __init__(self, *, audited: Audited = _not_audited) -> None:
        self.audited = audited
        self._tools: dict[str, Tool] = {}
        self._specs: dict[bool, tuple[ToolSpec, ...]] = {}
        self._gate_specs: tuple[ToolSpec, ...] = ()
        self._by_set: dict[tuple[bool, frozenset[str]], tuple[ToolSpec, ...]] = {}

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
        self._gate_specs = tuple(
            t.spec() for t in self._tools.values() if t.proactive and not t.admin_only
        )
        self._by_set.clear()

    def specs_for(self, scope: Scope) -> tuple[ToolSpec, ...]:
        return self._specs.get(scope.is_admin, ())

    async def offered_specs(self, scope: Scope) -> tuple[ToolSpec, ...]:
        """`specs_for(scope)` less the tools whose `offered` says no for this turn."""
        specs = self._specs.get(scope.is_admin, ())
        left_out = frozenset(
            [t.name for t in self._tools.values() if t.offered and not await t.offered(scope)]
        )
        if not left_out:
            return specs
        key = (scope.is_admin, left_out)
        found = self._by_set.get(key)
        if found is None:
            found = self._by_set[key] = tuple(s for s in specs if s.name not in left_out)
        return found

    def proactive_specs(self) -> tuple[ToolSpec, ...]:
        return self._gate_specs

    def proactive(self) -> GateTools:
        """The tools marked `proactive`, as a tool set of their own (read at each call, so it
        sees tools registered later)."""
        return GateTools(self)

    async def call(self, scope: Scope, call: ToolCall, *, proactive: bool = False) -> ToolResult:
        tool = self._tools.get(call.name)
        if (
            tool is None
            or (tool.admin_only and not scope.is_admin)
            or (proactive and not (tool.proactive and not tool.admin_only))
        ):
            if tool is not None and tool.admin_only:
                await self._audit(scope, tool.name, call.input, "refused", "not allowed")
            return ToolResult(call.id, f"unknown tool: {call.name}", is_error=True)
        result = await self._run(tool, scope, call)
        if tool.admin_only:
            outcome = "error" if result.is_error else "ok"
            first = result.content.splitlines()[0] if result.content else ""
            await self._audit(scope, tool.name, call.input, outcome, first)
        return result

    async def _audit(
        self, scope: Scope, name: str, args: dict[str, Any], outcome: str, result: str
    ) -> None:
        try:
            await self.audited(scope, name, args, outcome, result)
        except Exception:  # the tool's result matters more to the turn than its audit row
            log.exception("could not audit the %s call of %s", name, scope.user.key)

    async def _run(self, tool: Tool, scope: Scope, call: ToolCall) -> ToolResult:
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


class GateTools:
    """The registry's `proactive` tools: what the proactive gate may offer and run."""

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry

    def specs_for(self, scope: Scope) -> tuple[ToolSpec, ...]:
        return self._registry.proactive_specs()

    async def call(self, scope: Scope, call: ToolCall) -> ToolResult:
        return await self._registry.call(scope, call, proactive=True)
