"""Schema migrations: an ordered list, tracked with `PRAGMA user_version`.

Migration N (1-based) brings the schema from version N-1 to N inside its own `BEGIN IMMEDIATE`
transaction, together with the `user_version` bump, so a crash leaves either the old or the new
schema. Statements are executed one by one: `executescript()` would commit the open transaction.
A shipped migration is never edited; change the schema by appending a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

from gateway.core.errors import SchemaTooNew
from vault.db import Vault
from vault.schema import Migration
from vault.schema_budget_holds import BUDGET_HOLDS
from vault.schema_context_refresh import CONTEXT_REFRESH
from vault.schema_delivery import DELIVERY_ORDER
from vault.schema_intake import INTAKE
from vault.schema_intake_claims import INTAKE_CLAIMS
from vault.schema_knowledge import KNOWLEDGE
from vault.schema_leases import LEASES
from vault.schema_limits import LIMITS
from vault.schema_message_indexes import MESSAGE_INDEXES
from vault.schema_outbox_buttons import OUTBOX_BUTTONS
from vault.schema_pairing import PAIRING
from vault.schema_proactive_gate import PROACTIVE_GATE
from vault.schema_replicas import REPLICAS
from vault.schema_reply_history import REPLY_HISTORY
from vault.schema_subscriptions import SUBSCRIPTIONS
from vault.schema_suggestions import SUGGESTIONS
from vault.schema_traces import CONTEXT_TRACES
from vault.schema_webhook_leases import WEBHOOK_LEASES

log = logging.getLogger(__name__)


CORE = Migration(
    "core",
    (
        """CREATE TABLE users (
            id INTEGER PRIMARY KEY,
            channel TEXT NOT NULL,
            user_id TEXT NOT NULL,
            display_name TEXT NOT NULL DEFAULT '',
            timezone TEXT,
            settings TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(settings)),
            first_seen_ms INTEGER NOT NULL,
            last_seen_ms INTEGER NOT NULL,
            UNIQUE (channel, user_id)
        ) STRICT""",
        """CREATE TABLE chats (
            id INTEGER PRIMARY KEY,
            channel TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            thread_id TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL DEFAULT 'dm' CHECK (kind IN ('dm', 'group')),
            unreachable_ms INTEGER,
            created_ms INTEGER NOT NULL,
            UNIQUE (channel, chat_id, thread_id)
        ) STRICT""",
        """CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            chat INTEGER NOT NULL REFERENCES chats(id),
            started_ms INTEGER NOT NULL,
            ended_ms INTEGER,
            summary TEXT,
            analyzer_state TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(analyzer_state))
        ) STRICT""",
        "CREATE UNIQUE INDEX sessions_open ON sessions(chat) WHERE ended_ms IS NULL",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            session INTEGER NOT NULL REFERENCES sessions(id),
            chat INTEGER NOT NULL REFERENCES chats(id),
            user INTEGER REFERENCES users(id),
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            kind TEXT NOT NULL DEFAULT 'chat'
                CHECK (kind IN ('chat', 'command', 'proactive', 'notice')),
            text TEXT NOT NULL,
            tokens INTEGER NOT NULL DEFAULT 0,
            platform_id TEXT,
            at_ms INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX messages_session ON messages(session, id)",
        "CREATE INDEX messages_chat_time ON messages(chat, at_ms)",
        "CREATE INDEX messages_user_time ON messages(user, at_ms)",
        """CREATE TABLE memories (
            id INTEGER PRIMARY KEY,
            user INTEGER NOT NULL REFERENCES users(id),
            text TEXT NOT NULL,
            created_ms INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX memories_user ON memories(user, id)",
        """CREATE VIRTUAL TABLE memories_fts USING fts5(
            text, content='memories', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text);
        END""",
        """CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
        END""",
        """CREATE TABLE inbound_seen (
            key TEXT PRIMARY KEY,
            seen_ms INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE outbox (
            id INTEGER PRIMARY KEY,
            idempotency_key TEXT NOT NULL UNIQUE,
            channel TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            thread_id TEXT,
            kind TEXT NOT NULL CHECK (kind IN ('reply', 'proactive', 'notice')),
            text TEXT NOT NULL,
            reply_to TEXT,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'uncertain')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_ms INTEGER NOT NULL,
            last_error TEXT,
            platform_ids TEXT,
            created_ms INTEGER NOT NULL,
            sent_ms INTEGER
        ) STRICT""",
        """CREATE INDEX outbox_due ON outbox(next_attempt_ms)
            WHERE status = 'pending'""",
        """CREATE TABLE llm_calls (
            id INTEGER PRIMARY KEY,
            at_ms INTEGER NOT NULL,
            chat_key TEXT,
            purpose TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            latency_ms INTEGER NOT NULL,
            ok INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX llm_calls_time ON llm_calls(at_ms)",
    ),
)

ANALYZER = Migration(
    "analyzer",
    (
        """CREATE TABLE analyzer_events (
            id INTEGER PRIMARY KEY,
            at_ms INTEGER NOT NULL,
            chat INTEGER NOT NULL REFERENCES chats(id),
            session INTEGER NOT NULL REFERENCES sessions(id),
            event TEXT NOT NULL CHECK (event IN ('shown', 'followed')),
            command TEXT NOT NULL CHECK (command IN ('clear', 'compact'))
        ) STRICT""",
        "CREATE INDEX analyzer_events_time ON analyzer_events(at_ms)",
    ),
)

AUDIT = Migration(
    "audit",
    (
        """CREATE TABLE audit_log (
            id INTEGER PRIMARY KEY,
            at_ms INTEGER NOT NULL,
            actor TEXT NOT NULL,
            via TEXT NOT NULL,
            action TEXT NOT NULL,
            args TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(args)),
            outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'refused', 'error')),
            result TEXT NOT NULL DEFAULT ''
        ) STRICT""",
        "CREATE INDEX audit_log_time ON audit_log(at_ms)",
    ),
)

# Proactive follow-ups. Intents and triggers share one lifecycle: `pending` (claimable when due
# and not leased) -> `delivering` (outbox row written in the same transaction) -> a terminal
# state; or straight from `pending` to a terminal state. The `claim` token guards every state
# change, so an engine whose lease expired cannot overwrite the run that took over.
_ITEM_LIFECYCLE = """
    execute_at INTEGER NOT NULL,
    due_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivering', 'sent',
        'skipped', 'expired', 'cancelled', 'failed', 'uncertain')),
    reason TEXT NOT NULL DEFAULT '',
    result TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    deferrals INTEGER NOT NULL DEFAULT 0,
    claim TEXT,
    lease_until INTEGER,
    outbox_id INTEGER REFERENCES outbox(id),
    finished_at INTEGER"""

PROACTIVE = Migration(
    "proactive",
    (
        f"""CREATE TABLE proactive_intents (
            id INTEGER PRIMARY KEY,
            chat INTEGER NOT NULL REFERENCES chats(id),
            user INTEGER NOT NULL REFERENCES users(id),
            what TEXT NOT NULL,
            why TEXT NOT NULL DEFAULT '',
            confidence REAL NOT NULL DEFAULT 0.8 CHECK (confidence BETWEEN 0 AND 1),
            kind TEXT NOT NULL DEFAULT 'ai' CHECK (kind IN ('ai', 'user_reminder')),
            exact_time INTEGER NOT NULL DEFAULT 0,{_ITEM_LIFECYCLE}
        ) STRICT""",
        """CREATE INDEX proactive_intents_due ON proactive_intents(execute_at)
            WHERE status = 'pending'""",
        """CREATE INDEX proactive_intents_delivering ON proactive_intents(id)
            WHERE status = 'delivering'""",
        "CREATE INDEX proactive_intents_user ON proactive_intents(user, status)",
        f"""CREATE TABLE proactive_triggers (
            id INTEGER PRIMARY KEY,
            type TEXT NOT NULL
                CHECK (type IN ('dormant_user', 'unanswered', 'engagement_drop', 'external')),
            chat INTEGER NOT NULL REFERENCES chats(id),
            user INTEGER NOT NULL REFERENCES users(id),
            context TEXT NOT NULL,
            source_key TEXT NOT NULL,{_ITEM_LIFECYCLE}
        ) STRICT""",
        """CREATE INDEX proactive_triggers_due ON proactive_triggers(execute_at)
            WHERE status = 'pending'""",
        """CREATE INDEX proactive_triggers_delivering ON proactive_triggers(id)
            WHERE status = 'delivering'""",
        # One open trigger per (user, type); one trigger ever per detected situation.
        """CREATE UNIQUE INDEX proactive_triggers_open ON proactive_triggers(user, type)
            WHERE status IN ('pending', 'delivering')""",
        """CREATE UNIQUE INDEX proactive_triggers_source
            ON proactive_triggers(user, type, source_key)""",
        """CREATE TABLE proactive_log (
            id INTEGER PRIMARY KEY,
            user INTEGER NOT NULL REFERENCES users(id),
            chat INTEGER NOT NULL REFERENCES chats(id),
            type TEXT NOT NULL CHECK (type IN ('intent', 'trigger')),
            source_id INTEGER NOT NULL,
            outbox_id INTEGER REFERENCES outbox(id),
            status TEXT NOT NULL DEFAULT 'delivering'
                CHECK (status IN ('delivering', 'sent', 'failed', 'uncertain')),
            sent_at INTEGER NOT NULL,
            engaged INTEGER NOT NULL DEFAULT 0,
            engaged_at INTEGER,
            UNIQUE (type, source_id)
        ) STRICT""",
        # Covering indexes: quota counts read the index only, never the table.
        "CREATE INDEX proactive_log_user ON proactive_log(user, sent_at, status)",
        "CREATE INDEX proactive_log_time ON proactive_log(sent_at, status)",
    ),
)

MIGRATIONS: tuple[Migration, ...] = (
    CORE,
    ANALYZER,
    AUDIT,
    PROACTIVE,
    INTAKE,
    PAIRING,
    DELIVERY_ORDER,
    LIMITS,
    KNOWLEDGE,
    PROACTIVE_GATE,
    REPLY_HISTORY,
    CONTEXT_REFRESH,
    SUGGESTIONS,
    SUBSCRIPTIONS,
    REPLICAS,
    CONTEXT_TRACES,
    INTAKE_CLAIMS,
    LEASES,
    MESSAGE_INDEXES,
    OUTBOX_BUTTONS,
    WEBHOOK_LEASES,
    BUDGET_HOLDS,
)


async def migrate(vault: Vault, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """Apply pending migrations in order; return the names applied.

    On PostgreSQL the same list runs through `vault/pg/migrate.py` (translated, one migrator
    at a time across replicas)."""
    if vault.dialect == "postgresql":
        from vault.pg.migrate import migrate_pg
        from vault.pg.vault import PgVault

        return await migrate_pg(cast(PgVault, vault), migrations)
    current = await vault.user_version()
    if current > len(migrations):
        raise SchemaTooNew(current, len(migrations))
    applied = []
    for version, migration in enumerate(migrations[current:], start=current + 1):
        async with vault.transaction() as tx:
            for statement in migration.statements:
                await tx.execute(statement)
            await tx.execute(f"PRAGMA user_version = {version}")
        log.info("vault migration %d (%s) applied", version, migration.name)
        applied.append(migration.name)
    return applied
