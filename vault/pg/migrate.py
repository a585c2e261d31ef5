"""Migrations on PostgreSQL: the same ordered list, one transaction each, one migrator at a time.

The version is the single row of `iris_schema`. Replicas starting together all call `migrate`:
the first takes a session-level advisory lock and applies what is pending; the others wait on
the lock, then find nothing left to do. A database migrated by a newer Iris (a higher version
than this binary knows) is refused, naming both versions — running on it could corrupt it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gateway.core.errors import SchemaTooNew, VaultError
from vault.pg.connection import PgRaw, mapped_errors
from vault.pg.schema import pg_statements
from vault.pg.vault import PgVault, schema_version
from vault.schema import Migration

log = logging.getLogger(__name__)

# pg_advisory_lock key of the migrator: "iris" + "migr" as two 32-bit halves.
MIGRATION_LOCK = 0x69726973_6D696772


def _apply(raw: PgRaw, migrations: Sequence[Migration]) -> list[str]:
    with mapped_errors():
        raw.pg.execute(b"SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        with mapped_errors():
            raw.pg.execute(
                b"""CREATE TABLE IF NOT EXISTS iris_schema (
                    one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
                    version INTEGER NOT NULL)"""
            )
            raw.pg.execute(b"INSERT INTO iris_schema (version) VALUES (0) ON CONFLICT DO NOTHING")
        current = schema_version(raw)
        if current > len(migrations):
            raise SchemaTooNew(current, len(migrations))
        applied = []
        for version, migration in enumerate(migrations[current:], start=current + 1):
            statements = pg_statements(migration)
            with mapped_errors():
                raw.pg.execute(b"BEGIN")
                try:
                    for statement in statements:
                        raw.execute_ddl(statement)
                    raw.pg.execute(b"UPDATE iris_schema SET version = %s", (version,))
                except BaseException:
                    raw.pg.execute(b"ROLLBACK")
                    raise
                raw.pg.execute(b"COMMIT")
            log.info("vault migration %d (%s) applied", version, migration.name)
            applied.append(migration.name)
        return applied
    finally:
        with mapped_errors():
            raw.pg.execute(b"SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


async def migrate_pg(vault: PgVault, migrations: Sequence[Migration]) -> list[str]:
    """Apply pending migrations in order (waiting for another migrator); return their names."""
    try:
        return await vault.on_writer(lambda raw: _apply(raw, migrations))
    except VaultError:
        raise
    except Exception as exc:
        raise VaultError(f"vault migration failed: {exc}") from exc
