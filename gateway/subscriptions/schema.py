"""Request and response bodies of the subscription API, as pydantic models (the admin API
validates with them and publishes their JSON schemas in `/openapi.json`).

Every rule a fuzzer could trip is written into the schema, so a request the document calls
valid is accepted: the three kinds of pattern are a union on `type`, and the entity regex
carries `format: regex`; `url` belongs to webhook subscriptions only (a union on
`callback`) and must be http(s); ids have fixed shapes. What is left to the server is named
in the 4xx detail (`patterns.0.entity.pattern` for an expression the `regex` engine cannot
compile).
"""

from __future__ import annotations

from typing import Annotated, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator

KEY_PATTERN = r"^[a-z]+:[!-9;-~]+(:[!-~]+)?$"  # the admin API's chat and user keys
HAS_TEXT = r"[^\t\n\v\f\r ]"
SUB_ID = r"^sub_[0-9a-f]{16}$"
SUGGESTION_ID = r"^sug_[0-9a-f]{16}$"
CURSOR = r"^[0-9]{1,18}$"
URL = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[!-~]*)?$"
MAX_COOLDOWN_S = 7 * 24 * 3600


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Query(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class TopicPattern(_Body):
    """A semantic query: matched by the embedder when there is one, by shared words else."""

    type: Literal["topic"]
    pattern: str = Field(min_length=1, max_length=500, pattern=HAS_TEXT)
    priority: int = Field(1, ge=1, le=10)


class EntityPattern(_Body):
    """A regular expression (Python syntax), and/or a keyword list: any keyword, as a word,
    case-insensitively."""

    type: Literal["entity"]
    pattern: str = Field(min_length=1, max_length=500, json_schema_extra={"format": "regex"})
    keywords: list[Annotated[str, Field(min_length=1, max_length=100, pattern=HAS_TEXT)]] = Field(
        default_factory=list, max_length=50
    )
    priority: int = Field(1, ge=1, le=10)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            regex.compile(value)  # the engine that runs it (`matching.py`)
        except (regex.error, RecursionError, OverflowError, ValueError) as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class DocumentPattern(_Body):
    """A glob of document paths (`docs/runbooks/*.md`), as the knowledge index names them."""

    type: Literal["document"]
    pattern: str = Field(min_length=1, max_length=500, pattern=HAS_TEXT)
    priority: int = Field(1, ge=1, le=10)


Pattern = Annotated[TopicPattern | EntityPattern | DocumentPattern, Field(discriminator="type")]
ChatKey = Annotated[str, Field(pattern=KEY_PATTERN, max_length=200)]


class _Common(_Body):
    patterns: list[Pattern] = Field(min_length=1, max_length=20)
    min_relevance: float = Field(0.5, ge=0, le=1)
    max_per_trigger: int = Field(5, ge=1, le=20)
    cooldown_seconds: int = Field(5, ge=0, le=MAX_COOLDOWN_S)
    chats: list[ChatKey] = Field(
        default_factory=list, max_length=50, description="Only triggers in these chats"
    )
    users: list[ChatKey] = Field(
        default_factory=list, max_length=50, description="Only triggers by these users"
    )


class WebhookSubscription(_Common):
    callback: Literal["webhook"]
    url: str = Field(pattern=URL, max_length=2000, description="http(s) URL events are POSTed to")


class StreamSubscription(_Common):
    callback: Literal["sse", "poll"]


class SubscriptionRequest(RootModel[WebhookSubscription | StreamSubscription]):
    """A subscription: what to watch, how to be told, and how often at most."""

    root: Annotated[WebhookSubscription | StreamSubscription, Field(discriminator="callback")]
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"patterns": [{"type": "topic", "pattern": "deploy", "priority": 1}],
                 "callback": "webhook", "url": "https://hooks.example.com/iris",
                 "min_relevance": 0.5, "max_per_trigger": 5, "cooldown_seconds": 5},
                {"patterns": [{"type": "entity", "pattern": "INC-[0-9]+"}], "callback": "poll"},
            ]
        }
    )  # fmt: skip


class FeedbackRequest(_Body):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"action": "used", "item": 0, "subscription": "sub_0123456789abcdef"}]
        }
    )
    action: Literal["used", "dismissed"]
    item: int = Field(0, ge=0, le=100, description="Which item of the suggestion (0-based)")
    subscription: str = Field(pattern=SUB_ID, description="The subscription it was sent to")
    chat: str | None = Field(
        None, pattern=KEY_PATTERN, max_length=200, description="The chat it concerns, if any"
    )


class SuggestionsQuery(_Query):
    subscription: str = Field(pattern=SUB_ID, description="A poll subscription's id")
    since: str = Field("0", pattern=CURSOR, description="The cursor of the last page")


class ListQuery(_Query):
    callback: Literal["webhook", "sse", "poll", "any"] = Field(
        "any", description="Only subscriptions delivered this way"
    )
    state: Literal["enabled", "disabled", "any"] = Field(
        "any", description="Only enabled (or disabled) subscriptions"
    )


class StreamQuery(_Query):
    subscription: str = Field(pattern=SUB_ID, description="An sse subscription's id")


class EmptyBody(_Body):
    pass


# --- responses (documentation: the handlers build plain JSON) --------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class Created(_Out):
    id: str
    secret: str | None = None


class SubscriptionOut(_Out):
    id: str
    callback: str
    enabled: bool
    failures: int
    last_triggered_at: str | None


class Listing(_Out):
    subscriptions: list[SubscriptionOut]


class Deleted(_Out):
    id: str
    deleted: bool


class Page(_Out):
    events: list[dict[str, object]]
    cursor: str


class FeedbackOut(_Out):
    id: str
    status: str
