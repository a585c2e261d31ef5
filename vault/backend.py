"""Which vault a configuration gets: SQLite at `[vault] path`, or PostgreSQL at `[vault] url`.

The one place that chooses; PostgreSQL's modules (and psycopg, the `postgres` extra) are only
imported when a URL is configured, so a SQLite install never needs them.
"""

from __future__ import annotations

from pathlib import Path

from gateway.core.errors import ConfigError
from vault.db import Vault


def vault_for(path: Path, url: str = "", *, busy_timeout_ms: int = 5000) -> Vault:
    if not url:
        return Vault(path, busy_timeout_ms=busy_timeout_ms)
    try:
        from vault.pg.vault import PgVault
    except ImportError as exc:
        raise ConfigError(
            [
                "vault.url: PostgreSQL needs the postgres extra: "
                "pip install -e '.[postgres]' in the checkout"
            ]
        ) from exc
    return PgVault(url)
