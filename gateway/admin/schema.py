"""Request bodies of the admin HTTP API, and the OpenAPI document derived from them.

The pydantic models are the single source of truth: requests are validated against them
(422 with field errors) and `GET /openapi.json` publishes their JSON schemas.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

KEY_PATTERN = r"^[a-z]+:[^:\s]+(:[^\s]+)?$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IntentRequest(_Body):
    user: str = Field(pattern=KEY_PATTERN, description="User key, e.g. telegram:12345")
    chat: str = Field(pattern=KEY_PATTERN, description="Chat key, e.g. telegram:12345")
    what: str = Field(min_length=1, max_length=1000, description="What to follow up on")
    why: str = Field("", max_length=1000)
    delay_minutes: float | None = Field(None, ge=1, le=525_600)
    at: str | None = Field(None, description="ISO 8601 time with a UTC offset")
    confidence: float | None = Field(None, ge=0, le=1)
    kind: Literal["ai", "user_reminder"] = "ai"

    @field_validator("at")
    @classmethod
    def _at_has_offset(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            moment = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError("not an ISO 8601 time") from exc
        if moment.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2026-11-23T09:00:00+01:00")
        return value

    @model_validator(mode="after")
    def _one_time(self) -> IntentRequest:
        if (self.delay_minutes is None) == (self.at is None):
            raise ValueError("give exactly one of delay_minutes or at")
        return self


class TriggerRequest(_Body):
    """An outside event worth a check-in (a deploy finished, a ticket was answered): an
    `external` trigger, run through the same policy and gate as the detectors' triggers."""

    user: str = Field(pattern=KEY_PATTERN, description="User key, e.g. telegram:12345")
    chat: str = Field(pattern=KEY_PATTERN, description="Chat key, e.g. telegram:12345")
    context: str = Field(min_length=1, max_length=1000, description="What happened")
    key: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Your id for the event: posting it again for the user returns the first "
        "trigger (duplicate: true) instead of a second one",
    )

    @field_validator("context")
    @classmethod
    def _context_has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    delay_minutes: float = Field(0, ge=0, le=525_600, description="When to consider it")


class IdRequest(_Body):
    id: int = Field(ge=1)


class EmptyRequest(_Body):
    pass


ENDPOINTS: list[tuple[str, str, str, type[BaseModel] | None]] = [
    ("post", "/proactive/intent", "Register a follow-up for a user and chat", IntentRequest),
    ("post", "/proactive/trigger", "Raise an external trigger for a user and chat", TriggerRequest),
    ("post", "/proactive/cancel", "Cancel a pending follow-up", IdRequest),
    ("get", "/proactive/pending", "Pending follow-ups and triggers (query: user)", None),
    ("get", "/proactive/quota", "A user's proactive quota (query: user)", None),
    ("post", "/proactive/scan", "Run the passive scan now", EmptyRequest),
    ("post", "/proactive/execute", "Execute a follow-up now (policy and gate apply)", IdRequest),
    ("get", "/stats", "Usage figures for the last 24 hours and 30 days", None),
    ("get", "/metrics", "Prometheus metrics (text format)", None),
]

_ERRORS = {
    "400": "Malformed JSON",
    "401": "Missing or wrong bearer token",
    "404": "Unknown id or user",
    "409": "The item's state does not allow this",
    "413": "Body over 64 KiB",
    "422": "Invalid fields",
}


def openapi() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for method, path, summary, model in ENDPOINTS:
        operation: dict[str, Any] = {
            "summary": summary,
            "security": [{"bearer": []}],
            "responses": {"200": {"description": "OK"}}
            | {code: {"description": text} for code, text in _ERRORS.items()},
        }
        if model is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": model.model_json_schema()}},
            }
        if path in ("/proactive/pending", "/proactive/quota"):
            operation["parameters"] = [
                {
                    "name": "user",
                    "in": "query",
                    "required": path.endswith("quota"),
                    "schema": {"type": "string", "pattern": KEY_PATTERN},
                }
            ]
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "Iris admin API", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }
