"""The `[subscriptions]` section: how webhooks are delivered and how topics are matched."""

from __future__ import annotations

from pydantic import Field

from gateway.features.settings import Section


class SubscriptionsSection(Section):
    enabled: bool = True
    # A topic pattern matches when the embedder's cosine reaches this (lexical: half the words).
    topic_threshold: float = Field(0.5, ge=0, le=1)
    webhook_timeout_s: float = Field(10.0, gt=0, le=120)
    webhook_max_attempts: int = Field(6, ge=1, le=50)
    webhook_backoff_base_s: float = Field(2.0, gt=0, le=3600)
    webhook_backoff_max_s: float = Field(600.0, gt=0, le=86400)
    # Consecutive failed attempts (any events) after which a subscription is disabled.
    webhook_max_failures: int = Field(10, ge=1, le=1000)
    # A comment line on an idle event stream this often, so a vanished client is noticed.
    stream_keepalive_s: float = Field(15.0, gt=0, le=300)
