"""`[vault]`: where the vault lives (a SQLite file, or PostgreSQL at a URL) and how replicas
sharing a PostgreSQL vault hold its work."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from gateway.features.settings import Section


class VaultSection(Section):
    path: Path = Path("iris.db")
    busy_timeout_ms: int = Field(5000, ge=0)
    # Empty: the SQLite file at `path`. A `postgresql://user:password@host/db` URL: that
    # PostgreSQL database instead (the `postgres` extra).
    url: str = ""
    # This process among the replicas sharing a PostgreSQL vault (/healthz, /metrics, logs);
    # empty: host name, process id and a random suffix.
    replica_id: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9._-]*$")
    # How often a replica that does not lead (Telegram polling, Slack Socket Mode) tries to
    # take over, and how often the leader checks its database session: a takeover within
    # this after the leader dies (plus up to 20 s when the network, not the process, failed).
    leader_retry_s: float = Field(5.0, gt=0, le=10)
    # Replicas on PostgreSQL: a chat's saved messages are run by one replica at a time, which
    # holds the chat for this long and renews every third of it; another takes the chat over
    # when the lease runs out (its holder died). Chats nobody runs are looked for this often
    # besides the LISTEN/NOTIFY hints (at most 1 s, the fallback when hints are lost).
    inbound_lease_s: float = Field(15.0, ge=3, le=300)
    inbound_poll_s: float = Field(1.0, gt=0, le=1)
    # Replicas on PostgreSQL: an outgoing message is held by the replica sending it for this
    # long (renewed every third of it); once it runs out (the holder died) another replica
    # settles the row `uncertain` if it was mid-send, or sends it if it was waiting.
    outbox_lease_s: float = Field(30.0, ge=3, le=600)

    @field_validator("path")
    @classmethod
    def _names_a_file(cls, value: Path) -> Path:
        if not value.name:  # "" and "." (an empty setting) name no file
            raise ValueError("must name the vault's file, e.g. iris.db")
        return value

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if value and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be empty (SQLite at `path`) or a postgresql:// URL")
        return value
