"""Bulk loading (`vault/bulk.py`): the rows it writes are what the stores then read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from vault.bulk import SeedIntent, SeedMessage, SeedUser, add_intents, add_messages, add_users
from vault.conversations import Conversations
from vault.db import Vault
from vault.migrations import migrate
from vault.proactive.store import ProactiveStore
from vault.reports import MessageCount, Reports


async def test_bulk_rows_read_back_through_the_stores(tmp_path: Path) -> None:
    path = tmp_path / "bulk.db"
    async with Vault(path) as vault:
        await migrate(vault)
    with sqlite3.connect(path) as db:
        add_users(db, (SeedUser(n, "bench", f"u{n}", f"c{n}", 1_000, 1_000 + n)
                       for n in range(1, 4)))  # fmt: skip
        add_intents(db, [SeedIntent(1, 1, "later", 9_000, 500),
                         SeedIntent(2, 2, "sooner", 7_000, 500)])  # fmt: skip
        add_messages(db, [SeedMessage(3, 3, 3, "user", "hi", 2_000),
                          SeedMessage(3, 3, None, "assistant", "Did that work?", 2_500),
                          SeedMessage(1, 1, 1, "user", "hey", 3_000)])  # fmt: skip
    async with Vault(path) as vault:
        users = await Reports(vault).users(limit=10)
        assert [(u.pk, u.user_id, u.first_seen_ms, u.last_seen_ms) for u in users] == [
            (3, "u3", 1_000, 1_003), (2, "u2", 1_000, 1_002), (1, "u1", 1_000, 1_001),
        ]  # fmt: skip
        # Each user's chat and open session share the user's id.
        history = await Conversations(vault).history(3, limit=10)
        assert [(m.role, m.text, m.at_ms) for m in history] == [
            ("user", "hi", 2_000), ("assistant", "Did that work?", 2_500),
        ]  # fmt: skip
        assert await Reports(vault).message_counts(since_ms=0) == [
            MessageCount("bench", "assistant", 1), MessageCount("bench", "user", 2),
        ]  # fmt: skip
        store = ProactiveStore(vault)
        assert await store.counts("intent") == {"pending": 2}
        assert await store.next_due_ms() == 7_000
        first = await store.get("intent", 1)
        assert first is not None
        assert (first.what, first.kind, first.execute_at, first.due_at, first.created_at) == (
            "later", "ai", 9_000, 9_000, 500,
        )  # fmt: skip
        assert first.chat.chat_id == "c1" and first.chat.channel == "bench"
