"""Read-only figures for operators: the admin user list, message counts, the vault's size.

The admin surface (`/admin users`, `/admin stats`, `GET /stats`) and the `/metrics` gauges
report on tables that other stores write. The queries live here rather than at the call sites
so that SQL stays in the vault, and they return plain typed values — never `sqlite3.Row` —
so the gateway does not depend on column names. Reads go through the read-only connection and
never wait for the writer.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from vault.conversations import UserRow
from vault.db import Vault

# SQLite: the file's pages in use; PostgreSQL: the database's size on disk.
_VAULT_BYTES = {
    "sqlite": "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
    "postgresql": "SELECT pg_database_size(current_database())",
}


class MessageCount(NamedTuple):
    """Messages of one role in one channel's chats (`role` is "user" or "assistant")."""

    channel: str
    role: str
    messages: int


class Reports:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def users(self, limit: int) -> list[UserRow]:
        """The most recently seen users first, at most `limit` of them."""
        rows = await self.vault.fetchall(
            """SELECT id AS pk, channel, user_id, display_name, timezone, settings,
                      first_seen_ms, last_seen_ms
               FROM users ORDER BY last_seen_ms DESC LIMIT ?""",
            (limit,),
        )
        return [UserRow(**{**dict(row), "settings": json.loads(row["settings"])}) for row in rows]

    async def message_counts(self, since_ms: int) -> list[MessageCount]:
        """Messages since a time by channel and role, ordered by channel, then role."""
        rows = await self.vault.fetchall(
            """SELECT c.channel, m.role, count(*) FROM messages m JOIN chats c ON c.id = m.chat
               WHERE m.at_ms >= ? GROUP BY c.channel, m.role ORDER BY c.channel, m.role""",
            (since_ms,),
        )
        return [MessageCount(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    async def vault_bytes(self) -> int:
        """The database file's pages in use, in bytes (free pages and the WAL not counted)."""
        size = await self.vault.scalar(_VAULT_BYTES[self.vault.dialect])
        return int(size or 0)
