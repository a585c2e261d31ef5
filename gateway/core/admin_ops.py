"""What the admin surface can ask of the proactive engine, shared by `/admin` and the HTTP API.

A port: the proactive feature implements it (`proactive/admin_ops.py`) and hands it over
through the feature seam; the HTTP layer validates its pydantic bodies and maps them onto the
plain dataclasses below, so the engine never sees the HTTP schemas. Results are JSON-able dicts
so the HTTP API returns them as they are and chat renders them. Unknown ids raise `NotFound`,
forbidden transitions `WrongState`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class NewIntent:
    """A follow-up an admin registers for a user in a chat (keys like `telegram:123`).
    Exactly one of `delay_minutes` or `at` (ISO 8601 with a UTC offset) is set."""

    user: str
    chat: str
    what: str
    why: str = ""
    delay_minutes: float | None = None
    at: str | None = None
    confidence: float | None = None
    kind: Literal["ai", "user_reminder"] = "ai"


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTrigger:
    """An outside event worth a check-in; `key` makes a repeated post a duplicate."""

    user: str
    chat: str
    context: str
    key: str | None = None
    delay_minutes: float = 0


class ProactiveOps(Protocol):
    async def register(self, intent: NewIntent, *, now_ms: int) -> JSON:
        """Register a follow-up; NotFound if the user or chat is unknown."""

    async def trigger(self, trigger: NewTrigger, *, now_ms: int) -> JSON:
        """Raise an external trigger; NotFound if the user or chat is unknown, WrongState if
        its key was seen before or the user has an external trigger pending."""

    async def cancel(self, item_id: int, *, now_ms: int) -> JSON: ...

    async def pending(self, user: str | None) -> JSON:
        """Pending intents and triggers, optionally for one user key."""

    async def quota(self, user: str, *, now_ms: int) -> JSON: ...

    async def scan(self) -> JSON: ...

    async def execute(self, item_id: int, *, now_ms: int) -> JSON:
        """Run one pending intent now, through the normal policy and gate."""
