"""The `[subscriptions]` section: how webhooks are delivered and how topics are matched."""

from __future__ import annotations

from pydantic import Field

from gateway.features.settings import Section


class SubscriptionsSection(Section):
    enabled: bool = True
    # With the embedder, a topic matches a text nearer to it than to everyday subjects, and
    # whose cosine with it reaches this too (raise it to be stricter); lexical: half its words.
    topic_threshold: float = Field(0.5, ge=0, le=1)
    webhook_timeout_s: float = Field(10.0, gt=0, le=120)
    # Webhooks to loopback, private, link-local or reserved addresses (a receiver on this
    # host or network): refused unless on (`addresses.py`).
    webhook_private_addresses: bool = False
    webhook_max_attempts: int = Field(6, ge=1, le=50)
    webhook_backoff_base_s: float = Field(2.0, gt=0, le=3600)
    webhook_backoff_max_s: float = Field(600.0, gt=0, le=86400)
    # Consecutive failed attempts (any events) after which a subscription is disabled.
    webhook_max_failures: int = Field(10, ge=1, le=1000)
    # Replicas on PostgreSQL: a due event is POSTed by the replica that claimed it, holding it
    # for this long (renewed every third of it while it runs); another replica sends it once
    # the lease has run out (its holder died).
    webhook_lease_s: float = Field(30.0, ge=3, le=600)
    # A comment line on an idle event stream this often, so a vanished client is noticed.
    stream_keepalive_s: float = Field(15.0, gt=0, le=300)
    # Replicas on PostgreSQL: how often an open stream looks for another replica's events
    # while the wake-up hints (LISTEN/NOTIFY) are down.
    stream_poll_s: float = Field(1.0, gt=0, le=1)
