"""Long-term memories per user, searchable (FTS5 on SQLite, a tsvector on PostgreSQL).

Memories belong to a user (not a chat): what someone told Iris in a DM is known in a group
thread with them too, but never to another user. Every method takes the owning user's key, so
a tool scoped to one user cannot reach another user's rows.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from vault.db import Vault
from vault.pg.dialect import or_query

_WORD = re.compile(r"\w+", re.UNICODE)
log = logging.getLogger(__name__)

# Told after a memory is saved: (user pk, memory id, text). A failing listener is logged.
MemoryListener = Callable[[int, int, str], Awaitable[None]]

# On PostgreSQL other replicas add memories too, so "this user has none" is believed for this
# long only (seconds); on SQLite this process is the only writer and the answer is kept.
SHARED_NONE_TTL_S = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    id: int
    text: str
    created_ms: int


def fts_query(text: str) -> str:
    """A safe FTS5 query: OR of quoted words, so user text can't inject FTS syntax."""
    words = [w for w in _WORD.findall(text.lower()) if len(w) > 2][:16]
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


# The search per backend: FTS5 on SQLite; on PostgreSQL the generated `fts` tsvector column
# (`vault/pg/schema.py`), the same OR of quoted words as a tsquery ('a' | 'b').
_SEARCH = {
    "sqlite": """SELECT m.id, m.text, m.created_ms FROM memories_fts f
        JOIN memories m ON m.id = f.rowid
        WHERE memories_fts MATCH :match AND m.user = :user ORDER BY rank LIMIT :limit""",
    "postgresql": """SELECT id, text, created_ms FROM memories, to_tsquery('simple', :match) q
        WHERE fts @@ q AND user = :user ORDER BY ts_rank(fts, q) DESC, id LIMIT :limit""",
}


class Memories:
    """Use one instance per vault: it remembers which users have no memories at all, so the
    context pipeline skips the search for them (most users, most messages). On a shared
    (PostgreSQL) vault that answer expires after `SHARED_NONE_TTL_S`, since a memory saved
    by another replica is not seen here; "has some" is kept (a search then finds what is
    there, or nothing)."""

    def __init__(self, vault: Vault, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.vault = vault
        self._clock = clock
        self._has_any: dict[int, bool] = {}
        self._none_until: dict[int, float] = {}  # shared vault: when a "none" answer expires
        self.added: list[MemoryListener] = []  # e.g. the subscriptions' `memory_added` trigger

    async def remember(self, user: int, text: str, now_ms: int) -> int:
        async with self.vault.transaction() as tx:  # the FTS trigger writes a second table
            memory_id = int(
                await tx.scalar(
                    "INSERT INTO memories (user, text, created_ms) VALUES (?, ?, ?) RETURNING id",
                    (user, text, now_ms),
                )
            )
        self._has_any[user] = True
        for listener in self.added:
            try:
                await listener(user, memory_id, text)
            except Exception:
                log.exception("memory listener failed")
        return memory_id

    async def find(self, user: int, text: str) -> int | None:
        """The id of the user's memory with exactly this text, if there is one."""
        found = await self.vault.scalar(
            "SELECT id FROM memories WHERE user = ? AND text = ?", (user, text)
        )
        return None if found is None else int(found)

    async def listing(self, user: int, limit: int = 50) -> list[Memory]:
        rows = await self.vault.fetchall(
            "SELECT id, text, created_ms FROM memories WHERE user = ? ORDER BY id LIMIT ?",
            (user, limit),
        )
        return [Memory(**dict(r)) for r in rows]

    async def search(self, user: int, query: str, limit: int = 5) -> list[Memory]:
        match = fts_query(query)
        if not match:
            return []
        if not await self.has_any(user):
            return []
        if self.vault.dialect == "postgresql":
            match = or_query(match)
        rows = await self.vault.fetchall(
            _SEARCH[self.vault.dialect], {"match": match, "user": user, "limit": limit}
        )
        return [Memory(**dict(r)) for r in rows]

    async def has_any(self, user: int) -> bool:
        """Whether the user has a memory (asked once, then kept up to date by this object)."""
        known = self._has_any.get(user)
        shared = self.vault.dialect != "sqlite"
        if known is False and shared and self._clock() >= self._none_until.get(user, 0.0):
            del self._has_any[user]  # another replica may have saved one: ask again
            known = None
        if known is None:
            found = bool(
                await self.vault.scalar(
                    "SELECT EXISTS (SELECT 1 FROM memories WHERE user = ?)", (user,)
                )
            )
            # setdefault: a remember() that finished while we read has the newer answer.
            if self._has_any.setdefault(user, found) is False:
                self._none_until[user] = self._clock() + SHARED_NONE_TTL_S
        return self._has_any[user]

    async def forget(self, user: int, memory_id: int) -> bool:
        async with self.vault.transaction() as tx:
            deleted = await tx.execute_rowcount(
                "DELETE FROM memories WHERE id = ? AND user = ?", (memory_id, user)
            )
        self._has_any.pop(user, None)  # maybe that was the last one: ask again next time
        return deleted > 0

    async def forget_all(self, user: int) -> int:
        """Delete every memory of `user`; how many there were."""
        async with self.vault.transaction() as tx:  # (a row count would add the FTS trigger's)
            had = int(await tx.scalar("SELECT count(*) FROM memories WHERE user = ?", (user,)))
            await tx.execute("DELETE FROM memories WHERE user = ?", (user,))
        self._has_any.pop(user, None)
        return had

    async def count(self, user: int) -> int:
        return int(await self.vault.scalar("SELECT count(*) FROM memories WHERE user = ?", (user,)))
