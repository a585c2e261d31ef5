"""Read-only queries for the admin surface: pending follow-ups and triggers across users,
outcome counts for stats and metrics, and resolving user and chat keys to their rows (and a
user's time zone, for the quota)."""

from __future__ import annotations

from typing import Any

from vault.db import Vault

_PENDING = """SELECT i.id, u.channel || ':' || u.user_id AS user, i.execute_at, i.status, {what}
    FROM {table} i JOIN users u ON u.id = i.user
    WHERE i.status IN ('pending', 'delivering') {user_filter}
    ORDER BY i.execute_at LIMIT ?"""


class ProactiveAdminQueries:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def user_pk(self, key: str) -> int | None:
        channel, _, user_id = key.partition(":")
        found = await self.vault.scalar(
            "SELECT id FROM users WHERE channel = ? AND user_id = ?", (channel, user_id)
        )
        return None if found is None else int(found)

    async def user_timezone(self, user: int) -> str | None:
        """The user's own zone (None: not set, or no such user)."""
        found = await self.vault.scalar("SELECT timezone FROM users WHERE id = ?", (user,))
        return None if found is None else str(found)

    async def chat_pk(self, key: str) -> int | None:
        channel, _, rest = key.partition(":")
        chat_id, _, thread = rest.partition(":")
        found = await self.vault.scalar(
            "SELECT id FROM chats WHERE channel = ? AND chat_id = ? AND thread_id = ?",
            (channel, chat_id, thread),
        )
        return None if found is None else int(found)

    async def wrote_in(self, user: int, chat: int) -> bool:
        """Has `user` written in `chat`? (Proactive messages only go where the user is.)"""
        found = await self.vault.scalar(
            "SELECT 1 FROM messages WHERE chat = ? AND user = ? LIMIT 1", (chat, user)
        )
        return found is not None

    async def trigger_by_key(self, user: int, type: str, key: str) -> tuple[int, str] | None:
        row = await self.vault.fetchone(
            """SELECT id, status FROM proactive_triggers
               WHERE user = ? AND type = ? AND source_key = ?""",
            (user, type, key),
        )
        return None if row is None else (int(row[0]), str(row[1]))

    async def pending(self, user: int | None, limit: int = 100) -> dict[str, list[dict[str, Any]]]:
        user_filter = "AND i.user = ?" if user is not None else ""
        params: tuple[Any, ...] = (user, limit) if user is not None else (limit,)
        result: dict[str, list[dict[str, Any]]] = {}
        for name, table, what in (
            ("intents", "proactive_intents", "i.what, i.kind, i.confidence"),
            ("triggers", "proactive_triggers", "i.context AS what, i.type AS kind"),
        ):
            sql = _PENDING.format(what=what, table=table, user_filter=user_filter)
            result[name] = [dict(row) for row in await self.vault.fetchall(sql, params)]
        return result

    async def outcomes(self, since_ms: int) -> dict[str, dict[str, int]]:
        """Finished items by source and terminal status since a time."""
        result: dict[str, dict[str, int]] = {}
        for name, table, kind in (
            ("intents", "proactive_intents", "kind"),
            ("triggers", "proactive_triggers", "type"),
        ):
            rows = await self.vault.fetchall(
                f"""SELECT {kind}, status, count(*) FROM {table}
                    WHERE finished_at >= ? GROUP BY {kind}, status""",
                (since_ms,),
            )
            for kind_value, status, count in rows:
                result.setdefault(name, {})[f"{kind_value}/{status}"] = count
        return result

    async def log_totals(self) -> dict[str, int]:
        row = await self.vault.fetchone(
            "SELECT count(*), coalesce(sum(engaged), 0) FROM proactive_log"
        )
        assert row is not None
        return {"sent": int(row[0]), "engaged": int(row[1])}
