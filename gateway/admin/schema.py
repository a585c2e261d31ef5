"""Request and response bodies of the admin HTTP API, and the OpenAPI document derived from them.

The pydantic models are the single source of truth: requests are validated against them
(strictly: a number is not a string, `true` is not a number; 422 with field errors) and
`GET /openapi.json` publishes their JSON schemas, so the document promises exactly what the
server accepts. Where a rule is not a plain field constraint it is still written into the
schema: "exactly one of `delay_minutes` or `at`" is a `oneOf`, a time is RFC 3339 with an
offset (`format` plus the `pattern` the server checks), text must have a non-blank character,
and ids stop at SQLite's largest integer. What no schema can say (a time must fall between one
minute and one year from *now*, a user key names nobody) is a documented 400 or 404.

`ENDPOINTS` lists the built-in operations; features' reads (`ApiRead`, e.g. `GET /budget`),
writes (`ApiWrite`) and other routes (`ApiRoute`: path parameters, a query model, another
status, an event stream) are added beside them by `openapi(reads, writes, routes)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator
from pydantic.config import JsonDict

from gateway.features.contributions import ApiRead, ApiRoute, ApiWrite

# Printable ASCII keys (`telegram:-1001234`, `slack:C1:1767225600.000100`): explicit ranges,
# because `\s` means different things to the server's, the fuzzer's and the spec's regexes.
KEY_PATTERN = r"^[a-z]+:[!-9;-~]+(:[!-~]+)?$"
HAS_TEXT = r"[^\t\n\v\f\r ]"  # at least one character that is not ASCII whitespace
# A date-time with an offset, as JSON Schema's `format: date-time` (RFC 3339) has it.
_2 = "[0-9]{2}"
RFC3339 = rf"^[0-9]{{4}}-{_2}-{_2}T{_2}:{_2}:{_2}(\.[0-9]+)?(Z|[+-]{_2}:{_2})$"
EXAMPLE_KEY = "telegram:12345"
MAX_ID = 2**63 - 1  # SQLite's largest INTEGER: no row has an id beyond it
MAX_MINUTES = 525_600  # a year


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Exactly one of the two is a value; the other is absent or null.
_EXACTLY_ONE_TIME: JsonDict = {
    "oneOf": [
        {
            "required": ["delay_minutes"],
            "properties": {"delay_minutes": {"type": "number"}, "at": {"type": "null"}},
        },
        {
            "required": ["at"],
            "properties": {"at": {"type": "string"}, "delay_minutes": {"type": "null"}},
        },
    ]
}


class IntentRequest(_Body):
    """Exactly one of `delay_minutes` or `at` (the other absent or null)."""

    model_config = ConfigDict(
        json_schema_extra={
            **_EXACTLY_ONE_TIME,
            "examples": [
                {"user": EXAMPLE_KEY, "chat": EXAMPLE_KEY, "what": "Ask how the interview went",
                 "why": "They were nervous about it", "delay_minutes": 1440},
                {"user": EXAMPLE_KEY, "chat": EXAMPLE_KEY, "what": "Remind them of the dentist",
                 "at": "2026-06-01T09:00:00+02:00", "kind": "user_reminder"},
            ],
        }
    )  # fmt: skip

    user: str = Field(pattern=KEY_PATTERN, description="User key, e.g. telegram:12345")
    chat: str = Field(pattern=KEY_PATTERN, description="Chat key, e.g. telegram:12345")
    what: str = Field(
        min_length=1, max_length=1000, pattern=HAS_TEXT, description="What to follow up on"
    )
    why: str = Field("", max_length=1000)
    delay_minutes: float | None = Field(None, ge=1, le=MAX_MINUTES)
    at: str | None = Field(
        None,
        pattern=RFC3339,
        description="RFC 3339 time with a UTC offset, between one minute and one year from "
        "now (else 400)",
        json_schema_extra={"format": "date-time"},
    )
    confidence: float | None = Field(None, ge=0, le=1)
    kind: Literal["ai", "user_reminder"] = "ai"

    @field_validator("at")
    @classmethod
    def _at_is_a_time(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value)
            except ValueError as exc:
                raise ValueError("not a valid date and time") from exc
        return value

    @model_validator(mode="after")
    def _one_time(self) -> IntentRequest:
        if (self.delay_minutes is None) == (self.at is None):
            raise ValueError("give exactly one of delay_minutes or at")
        return self


class TriggerRequest(_Body):
    """An outside event worth a check-in (a deploy finished, a ticket was answered): an
    `external` trigger, run through the same policy and gate as the detectors' triggers."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"user": EXAMPLE_KEY, "chat": EXAMPLE_KEY, "key": "deploy-42",
                 "context": "The deploy they were waiting for finished"},
            ]
        }
    )  # fmt: skip

    user: str = Field(pattern=KEY_PATTERN, description="User key, e.g. telegram:12345")
    chat: str = Field(pattern=KEY_PATTERN, description="Chat key, e.g. telegram:12345")
    context: str = Field(
        min_length=1, max_length=1000, pattern=HAS_TEXT, description="What happened"
    )
    key: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Your id for the event: posting it again for the user returns the first "
        "trigger (duplicate: true) instead of a second one",
    )
    delay_minutes: float = Field(0, ge=0, le=MAX_MINUTES, description="When to consider it")

    @field_validator("context")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()


class IdRequest(_Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"id": 1}]})

    id: int = Field(ge=1, le=MAX_ID)


class EmptyRequest(_Body):
    pass


# --- responses (documentation only: the operations build plain JSON) ------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class FieldError(_Out):
    field: str
    message: str


class ErrorBody(_Out):
    error: str
    detail: str | list[FieldError] | None = None


class Scheduled(_Out):
    id: int
    status: str
    execute_at: int


class TriggerResult(_Out):
    id: int
    type: Literal["external"]
    status: str
    execute_at: int | None = None
    duplicate: bool = False


class ItemState(_Out):
    id: int
    status: str


class PendingItem(_Out):
    id: int
    user: str
    execute_at: int
    status: str
    what: str
    kind: str


class Pending(_Out):
    intents: list[PendingItem]
    triggers: list[PendingItem]


class Quota(_Out):
    user: str
    used_today: int
    max_per_day: int
    remaining: int
    timezone: str
    engagement_rate_30d: float | None


class ScanCounts(RootModel[dict[str, int]]):
    pass


class ReplicaSeen(_Out):
    id: str
    started_ms: int
    last_seen_ms: int
    leaderships: list[str]


class Replicas(_Out):
    replicas: list[ReplicaSeen]
    # counter name -> label values joined by "," -> the sum over the replicas listed
    counters: dict[str, dict[str, float]]


class UsageStats(_Out):
    last_24h: dict[str, Any] = Field(alias="24h")
    last_30d: dict[str, Any] = Field(alias="30d")
    replicas: Replicas | None = None  # the replicas seen in the last minute


class Document(_Out):
    openapi: str
    paths: dict[str, Any]


# --- the document -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    summary: str
    body: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    user_query: bool | None = None  # None: no `user` parameter; else whether it is required
    errors: tuple[int, ...] = ()  # besides 401, and what a body or a query brings
    params: Mapping[str, str] | None = None  # path parameters: name -> pattern
    query: type[BaseModel] | None = None  # query parameters, one per field
    status: int = 200
    stream: bool = False  # text/event-stream


ENDPOINTS: list[Endpoint] = [
    Endpoint("post", "/proactive/intent", "Register a follow-up for a user and chat",
             IntentRequest, Scheduled, errors=(404,)),
    Endpoint("post", "/proactive/trigger", "Raise an external trigger for a user and chat",
             TriggerRequest, TriggerResult, errors=(404, 409)),
    Endpoint("post", "/proactive/cancel", "Cancel a pending follow-up", IdRequest, ItemState,
             errors=(404, 409)),
    Endpoint("get", "/proactive/pending", "Pending follow-ups and triggers", None, Pending,
             user_query=False, errors=(404,)),
    Endpoint("get", "/proactive/quota", "A user's proactive quota", None, Quota,
             user_query=True, errors=(404,)),
    Endpoint("post", "/proactive/scan", "Run the passive scan now", EmptyRequest, ScanCounts,
             errors=(409,)),
    Endpoint("post", "/proactive/execute", "Execute a follow-up now (policy and gate apply)",
             IdRequest, Scheduled, errors=(404, 409)),
    Endpoint("get", "/stats", "Usage figures for the last 24 hours and 30 days", None,
             UsageStats),
    Endpoint("get", "/metrics", "Prometheus metrics (text format)"),
    Endpoint("get", "/openapi.json", "This document", None, Document),
]  # fmt: skip

_STATUS_TEXT = {
    400: "Malformed or too deeply nested JSON, or a compressed body (detail says which); for a "
    "follow-up also a time outside one minute to one year from now, which no schema can express",
    401: "Missing or wrong bearer token",
    404: "Unknown id, user or chat, or a user who never wrote in that chat",
    409: "The item's state does not allow this",
    413: "Body over 64 KiB",
    422: "Invalid fields (detail lists them)",
}


def openapi(
    reads: Sequence[ApiRead] = (), writes: Sequence[ApiWrite] = (), routes: Sequence[ApiRoute] = (),
    *, proactive: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """The document, with the features' reads (`GET path?user=`), writes (`POST path`) and
    other routes beside the built-in paths; without `proactive` (the engine is off), no
    `/proactive/*` path, as the server then serves none."""
    components: dict[str, Any] = {}
    features = [
        Endpoint("get", r.path, r.summary, user_query=r.user_query, errors=(404,)) for r in reads
    ] + [Endpoint("post", w.path, w.summary, w.body, errors=(400, 404)) for w in writes]
    features += [
        Endpoint(r.method.lower(), r.path, r.summary, r.body, r.response, errors=r.errors,
                 params=r.params or None, query=r.query, status=r.status,
                 stream=r.stream is not None)
        for r in routes
    ]  # fmt: skip
    paths: dict[str, Any] = {}
    built_in = [e for e in ENDPOINTS if proactive or not e.path.startswith("/proactive/")]
    for endpoint in [*built_in, *features]:
        paths.setdefault(endpoint.path, {})[endpoint.method] = _operation(endpoint, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Iris admin API", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": components,
        },
        "paths": paths,
    }


def _operation(endpoint: Endpoint, components: dict[str, Any]) -> dict[str, Any]:
    codes = {401, *endpoint.errors}
    if endpoint.body is not None:
        codes |= {400, 413, 422}
    if endpoint.user_query is not None or endpoint.params or endpoint.query is not None:
        codes.add(422)
    error = {"application/json": {"schema": _schema(ErrorBody, components)}}
    if endpoint.path == "/metrics":
        ok: dict[str, Any] = {"text/plain": {"schema": {"type": "string"}}}
    elif endpoint.stream:
        ok = {"text/event-stream": {"schema": {"type": "string"}}}
    elif endpoint.response is not None:
        ok = {"application/json": {"schema": _schema(endpoint.response, components)}}
    else:
        ok = {"application/json": {"schema": {"type": "object"}}}
    operation: dict[str, Any] = {
        "summary": endpoint.summary,
        "security": [{"bearer": []}],
        "responses": {str(endpoint.status): {"description": "OK", "content": ok}}
        | {str(c): {"description": _STATUS_TEXT[c], "content": error} for c in sorted(codes)},
    }
    if endpoint.body is not None:
        operation["requestBody"] = {
            # A body with nothing required may be left out (`POST /proactive/scan`).
            "required": bool(endpoint.body.model_json_schema().get("required"))
            or issubclass(endpoint.body, RootModel),  # a union of bodies: one is required
            "content": {"application/json": {"schema": _schema(endpoint.body, components)}},
        }
    parameters = _parameters(endpoint)
    if parameters:
        operation["parameters"] = parameters
    if endpoint.user_query is not None:
        operation["parameters"] = [
            {
                "name": "user",
                "in": "query",
                "required": endpoint.user_query,
                "description": "User key, e.g. telegram:12345",
                "schema": {"type": "string", "pattern": KEY_PATTERN},
                "example": EXAMPLE_KEY,
            }
        ]
    return operation


def _parameters(endpoint: Endpoint) -> list[dict[str, Any]]:
    """Path parameters (each a string matching its pattern) and one query parameter per
    field of the query model."""
    found: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True,
         "schema": {"type": "string", "pattern": pattern}}
        for name, pattern in (endpoint.params or {}).items()
    ]  # fmt: skip
    if endpoint.query is not None:
        schema = endpoint.query.model_json_schema()
        required = set(schema.get("required", ()))
        for name, prop in schema.get("properties", {}).items():
            prop = {k: v for k, v in prop.items() if k not in ("title", "default")}
            found.append(
                {"name": name, "in": "query", "required": name in required, "schema": prop}
                | ({"description": prop["description"]} if "description" in prop else {})
            )
    return found


def _schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` to the model's schema, hoisting it and its nested models into components (a
    `#/$defs/...` ref inside the document would resolve against the document's root)."""
    mode: Literal["validation", "serialization"] = (
        "validation" if issubclass(model, _Body) else "serialization"
    )
    schema = model.model_json_schema(
        by_alias=True, ref_template="#/components/schemas/{model}", mode=mode
    )
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}
