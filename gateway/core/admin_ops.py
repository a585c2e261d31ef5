"""What the admin surface can ask of the proactive engine, shared by `/admin` and the HTTP API.

The engine implements this Protocol (wired in `gateway/app.py`); results are JSON-able dicts so
the HTTP API returns them as they are and chat renders them. Unknown ids raise `NotFound`,
forbidden transitions `WrongState`.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.admin.schema import IntentRequest, TriggerRequest

JSON = dict[str, Any]


class ProactiveOps(Protocol):
    async def register(self, request: IntentRequest, *, now_ms: int) -> JSON:
        """Register a follow-up; NotFound if the user or chat is unknown."""

    async def trigger(self, request: TriggerRequest, *, now_ms: int) -> JSON:
        """Raise an external trigger; NotFound if the user or chat is unknown, WrongState if
        its key was seen before or the user has an external trigger pending."""

    async def cancel(self, item_id: int, *, now_ms: int) -> JSON: ...

    async def pending(self, user: str | None) -> JSON:
        """Pending intents and triggers, optionally for one user key."""

    async def quota(self, user: str, *, now_ms: int) -> JSON: ...

    async def scan(self) -> JSON: ...

    async def execute(self, item_id: int, *, now_ms: int) -> JSON:
        """Run one pending intent now, through the normal policy and gate."""
