"""The `CallGuard` port: what the agent asks before every model call, and tells after it.

Spending limits are a feature (`gateway/limits/`), but every model call goes through
`Agent.call` — chat turns, `/compact`, the proactive gate, the analyzer's confirmation — so the
agent is where they are enforced. It knows nothing of prices or windows: before a call it asks
the guard to `admit` the request (which reserves an estimate of its cost, waits while a
concurrent call might take the last of a budget, or raises `OverBudget`), and after the call
it `settle`s the hold with the real usage. `settle` is synchronous so that a cancelled call
still releases its reservation in a `finally`.
"""

from __future__ import annotations

from typing import Protocol

from gateway.core.llm import LLMRequest, LLMResponse, Payer


class Hold(Protocol):
    def settle(self, response: LLMResponse | None) -> None:
        """Replace the reservation with what the call really used (nothing when it failed)."""


class CallGuard(Protocol):
    async def admit(self, request: LLMRequest, model: str) -> Hold:
        """Reserve the call's estimated cost, or raise `OverBudget` (the call is not made)."""

    async def remaining(self, payer: Payer) -> str | None:
        """What is left of the payer's budgets, in a line or two for `/status` (None: no
        limits apply to them)."""
