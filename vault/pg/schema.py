"""PostgreSQL's schema: the SQLite migrations, translated, with explicit variants where needed.

Each SQLite migration N is PostgreSQL migration N too, so both backends count versions alike.
Its statements go through `dialect.ddl`; the few that have no mechanical equivalent (FTS5
virtual tables and the triggers that feed them) are replaced here by name, visibly:

- full-text search is a generated `tsvector` column (`fts`) with a GIN index on the table
  itself, so no trigger has to keep a second table in step;
- `knowledge_vocab` (fts5vocab: term, doc, cnt) is a view over `ts_stat`.

A store that searches reads `fts` in its own PostgreSQL variant of the query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.core.errors import VaultError
from vault.pg.dialect import ddl
from vault.schema import Migration

_NAMED = re.compile(r"^\s*CREATE\s+(?:VIRTUAL\s+TABLE|TRIGGER)\s+(\w+)", re.IGNORECASE)

# (migration, object the SQLite statement creates) -> the PostgreSQL statements instead.
VARIANTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("core", "memories_fts"): (
        """ALTER TABLE memories ADD COLUMN fts tsvector
            GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED""",
        "CREATE INDEX memories_fts ON memories USING gin (fts)",
    ),
    ("core", "memories_ai"): (),
    ("core", "memories_ad"): (),
    ("knowledge", "knowledge_fts"): (
        """ALTER TABLE knowledge_chunks ADD COLUMN fts tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('simple', heading), 'A') || to_tsvector('simple', text)
        ) STORED""",
        "CREATE INDEX knowledge_fts ON knowledge_chunks USING gin (fts)",
    ),
    ("knowledge", "knowledge_vocab"): (
        """CREATE VIEW knowledge_vocab AS SELECT word AS term, ndoc AS doc, nentry AS cnt
            FROM ts_stat('SELECT fts FROM knowledge_chunks')""",
    ),
    ("knowledge", "knowledge_chunks_ai"): (),
    ("knowledge", "knowledge_chunks_ad"): (),
}


def pg_statements(migration: Migration) -> list[str]:
    """The PostgreSQL statements of one migration, in order."""
    out: list[str] = []
    for statement in migration.statements:
        named = _NAMED.match(statement)
        if named is None:
            out.append(ddl(statement))
            continue
        key = (migration.name, named.group(1))
        if key not in VARIANTS:
            raise VaultError(f"migration {migration.name}: no PostgreSQL variant for {key[1]}")
        out.extend(VARIANTS[key])
    return out


def pg_migrations(migrations: Sequence[Migration]) -> list[list[str]]:
    return [pg_statements(m) for m in migrations]
