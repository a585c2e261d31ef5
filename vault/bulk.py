"""Bulk loading of synthetic rows: users with their chats and sessions, intents, messages.

The benchmarks (`bench/pulse.py`) fill a vault with up to millions of rows before they
measure anything. Going through the stores would make the setup the slowest part, so these
functions write straight to a `sqlite3.Connection`, one `executemany` per table (they are
synchronous bodies, so they also run inside `Vault.run`). They live in the vault so that SQL
stays here and a schema change that breaks them is seen beside the migration. Rows carry
only what the benchmarks vary; every other column takes its default. The caller commits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import NamedTuple


class SeedUser(NamedTuple):
    """A user with one chat and one open session; all three rows get `pk` as their id and
    are created when the user was first seen."""

    pk: int
    channel: str
    user_id: str
    chat_id: str
    first_seen_ms: int
    last_seen_ms: int


class SeedIntent(NamedTuple):
    """A pending intent (kind 'ai'), first due when it is to be executed."""

    chat: int
    user: int
    what: str
    execute_at: int
    created_at: int


class SeedMessage(NamedTuple):
    session: int
    chat: int
    user: int | None  # None for the assistant
    role: str
    text: str
    at_ms: int


def add_users(raw: sqlite3.Connection, users: Iterable[SeedUser]) -> None:
    rows = list(users)
    raw.executemany(
        "INSERT INTO users (id, channel, user_id, first_seen_ms, last_seen_ms) VALUES (?,?,?,?,?)",
        ((u.pk, u.channel, u.user_id, u.first_seen_ms, u.last_seen_ms) for u in rows),
    )
    raw.executemany(
        "INSERT INTO chats (id, channel, chat_id, created_ms) VALUES (?,?,?,?)",
        ((u.pk, u.channel, u.chat_id, u.first_seen_ms) for u in rows),
    )
    raw.executemany(
        "INSERT INTO sessions (id, chat, started_ms) VALUES (?,?,?)",
        ((u.pk, u.pk, u.first_seen_ms) for u in rows),
    )


def add_intents(raw: sqlite3.Connection, intents: Iterable[SeedIntent]) -> None:
    raw.executemany(
        """INSERT INTO proactive_intents (chat, user, what, execute_at, due_at, created_at)
           VALUES (?, ?, ?, ?, ?, ?)""",
        ((i.chat, i.user, i.what, i.execute_at, i.execute_at, i.created_at) for i in intents),
    )


def add_messages(raw: sqlite3.Connection, messages: Iterable[SeedMessage]) -> None:
    raw.executemany(
        """INSERT INTO messages (session, chat, user, role, text, at_ms)
           VALUES (?, ?, ?, ?, ?, ?)""",
        messages,
    )
