"""Users, chats, sessions and messages: the conversation aggregate.

A chat has at most one open session (a partial unique index enforces it). `/clear` closes the
open session and starts an empty one; `/compact` does the same but carries a model-written
summary into the new session. Old messages are never deleted: they stay in the vault, out of the
model's context. Command messages are recorded (nothing a user sends is lost) but are not part
of the history the model sees.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.messages import ChatRef, Inbound, UserRef
from vault.db import Vault
from vault.history import NO_LIMIT, RecentHistory, StoredMessage, Window
from vault.inbound import claim

HISTORY_KINDS = ("chat", "proactive")

# Runs inside the transaction that records a user's message: (connection, user pk, chat pk,
# message kind, now). For bookkeeping that must happen whenever someone writes (engagement).
RecordHook = Callable[[sqlite3.Connection, int, int, str, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """Database ids and per-user facts the rest of a turn needs."""

    user_pk: int
    chat_pk: int
    session_pk: int
    message_pk: int
    timezone: str | None
    settings: dict[str, Any]
    summary: str | None
    session_started_ms: int
    analyzer_state: str = "{}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserRow:
    pk: int
    channel: str
    user_id: str
    display_name: str
    timezone: str | None
    settings: dict[str, Any]
    first_seen_ms: int
    last_seen_ms: int


def _upsert_user(raw: sqlite3.Connection, user: UserRef, now_ms: int) -> Any:
    return raw.execute(
        """INSERT INTO users (channel, user_id, display_name, first_seen_ms, last_seen_ms)
           VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (channel, user_id) DO UPDATE SET
               last_seen_ms = max(last_seen_ms, excluded.last_seen_ms),
               display_name = CASE WHEN excluded.display_name != ''
                              THEN excluded.display_name ELSE display_name END
           RETURNING id, timezone, settings""",
        (user.channel, user.user_id, user.display_name, now_ms, now_ms),
    ).fetchone()


def _chat_pk(raw: sqlite3.Connection, chat: ChatRef, kind: str, now_ms: int) -> int:
    row = raw.execute(
        """INSERT INTO chats (channel, chat_id, thread_id, kind, created_ms) VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (channel, chat_id, thread_id) DO UPDATE SET kind = kind
           RETURNING id""",
        (chat.channel, chat.chat_id, chat.thread_id or "", kind, now_ms),
    ).fetchone()
    return int(row[0])


def open_session(raw: sqlite3.Connection, chat: int, now_ms: int) -> Any:
    """The chat's open session (id, summary, started_ms, analyzer_state), created if there is
    none. Usually there is one: a lookup first spares the upsert's write of the row."""
    columns = "id, summary, started_ms, analyzer_state"
    return (
        raw.execute(
            f"SELECT {columns} FROM sessions WHERE chat = ? AND ended_ms IS NULL", (chat,)
        ).fetchone()
        or raw.execute(
            f"""INSERT INTO sessions (chat, started_ms) VALUES (?, ?)
            ON CONFLICT (chat) WHERE ended_ms IS NULL DO UPDATE SET chat = excluded.chat
            RETURNING {columns}""",
            (chat, now_ms),
        ).fetchone()
    )


INSERT_MESSAGE = """INSERT INTO messages (session, chat, user, role, kind, text, tokens,
                                          platform_id, at_ms)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"""


def insert_message(
    raw: sqlite3.Connection,
    *,
    session: int,
    chat: int,
    user: int | None,
    role: str,
    kind: str,
    text: str,
    tokens: int,
    now_ms: int,
    platform_id: str | None = None,
) -> int:
    """Append a message inside the caller's `Vault.run` transaction."""
    row = raw.execute(
        INSERT_MESSAGE, (session, chat, user, role, kind, text, tokens, platform_id, now_ms)
    ).fetchone()
    return int(row[0])


class Conversations:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        # Chats are never deleted, so their ids can be remembered: one statement less a turn.
        self._chat_pks: dict[tuple[str, str, str], int] = {}
        self._recent = RecentHistory()

    async def record_inbound(
        self,
        inbound: Inbound,
        *,
        kind: str,
        tokens: int,
        now_ms: int,
        dedupe_keys: tuple[str, ...] = (),
        hooks: Sequence[RecordHook] = (),
    ) -> Recorded | None:
        """Record a user's message and claim its dedupe keys atomically; None if a duplicate."""
        ref = inbound.chat
        cache_key = (ref.channel, ref.chat_id, ref.thread_id or "")
        cached_chat = self._chat_pks.get(cache_key)

        def record(raw: sqlite3.Connection) -> tuple[Any, int, Any, int] | None:
            if not claim(raw, dedupe_keys, now_ms):
                return None
            user = _upsert_user(raw, inbound.user, now_ms)
            chat = cached_chat or _chat_pk(raw, ref, inbound.kind.value, now_ms)
            session = open_session(raw, chat, now_ms)
            # Someone wrote here, so the chat works again (e.g. a user unblocked the bot).
            raw.execute(
                """UPDATE chats SET unreachable_ms = NULL
                   WHERE id = ? AND unreachable_ms IS NOT NULL""",
                (chat,),
            )
            message = insert_message(
                raw,
                session=session["id"],
                chat=chat,
                user=user["id"],
                role="user",
                kind=kind,
                text=inbound.text,
                tokens=tokens,
                now_ms=now_ms,
                platform_id=inbound.message_id or None,
            )
            for hook in hooks:
                hook(raw, user["id"], chat, kind, now_ms)
            return user, chat, session, message

        done = await self.vault.run(record)
        if done is None:
            return None
        user, chat, session, message = done
        self._chat_pks[cache_key] = chat  # only once committed: a rollback would undo the row
        return Recorded(
            user_pk=user["id"],
            chat_pk=chat,
            session_pk=session["id"],
            message_pk=message,
            timezone=user["timezone"],
            settings=json.loads(user["settings"]),
            summary=session["summary"],
            session_started_ms=session["started_ms"],
            analyzer_state=session["analyzer_state"],
        )

    async def find_recorded(self, inbound: Inbound) -> Recorded | None:
        """The ids of a user message recorded before (a replay after a restart), or None.
        Its session is the one it was recorded in, even if a newer one is open now."""
        ref = inbound.chat
        row = await self.vault.fetchone(
            """SELECT m.id AS message, m.session, m.chat, m.user, u.timezone, u.settings,
                      s.summary, s.started_ms, s.analyzer_state
               FROM chats c JOIN messages m ON m.chat = c.id
               JOIN users u ON u.id = m.user JOIN sessions s ON s.id = m.session
               WHERE c.channel = ? AND c.chat_id = ? AND c.thread_id = ?
                 AND m.platform_id = ? AND m.role = 'user'
               ORDER BY m.id DESC LIMIT 1""",
            (ref.channel, ref.chat_id, ref.thread_id or "", inbound.message_id),
        )
        if row is None or not inbound.message_id:
            return None
        return Recorded(
            user_pk=row["user"],
            chat_pk=row["chat"],
            session_pk=row["session"],
            message_pk=row["message"],
            timezone=row["timezone"],
            settings=json.loads(row["settings"]),
            summary=row["summary"],
            session_started_ms=row["started_ms"],
            analyzer_state=row["analyzer_state"],
        )

    async def record_reply(
        self, *, session: int, chat: int, kind: str, text: str, tokens: int, now_ms: int
    ) -> int:
        return await self.vault.run(
            lambda raw: insert_message(
                raw, session=session, chat=chat, user=None, role="assistant", kind=kind,
                text=text, tokens=tokens, now_ms=now_ms,
            )
        )  # fmt: skip

    async def history(
        self, session: int, *, limit: int, before_id: int | None = None
    ) -> list[StoredMessage]:
        """The last `limit` chat messages of a session before `before_id`, oldest first.

        With `before_id` (a committed message: the turn's own), reads only what is new since
        the last such read of the session (see `RecentHistory`); without it, reads in full.
        """
        upto = before_id if before_id is not None else NO_LIMIT
        known = self._recent.get(session, limit, upto) if before_id is not None else None
        since = known.upto if known is not None else 0
        rows = await self.vault.fetchall(
            f"""SELECT id, role, kind, text, tokens, at_ms FROM messages
                WHERE session = ? AND id >= ? AND id < ? AND kind IN {HISTORY_KINDS!r}
                ORDER BY id DESC LIMIT ?""",
            (session, since, upto, limit),
        )
        fresh = tuple(
            StoredMessage(id=r[0], role=r[1], kind=r[2], text=r[3], tokens=r[4], at_ms=r[5])
            for r in reversed(rows)
        )
        if known is None:
            messages, chars = fresh, sum(len(m.text) for m in fresh)
        else:
            messages = known.messages + fresh
            chars = known.chars + sum(len(m.text) for m in fresh)
            if len(messages) > limit:
                chars -= sum(len(m.text) for m in messages[:-limit])
                messages = messages[-limit:]
        if before_id is not None:
            self._recent.put(session, limit, Window(upto=upto, messages=messages, chars=chars))
        return list(messages)

    async def session_stats(self, session: int) -> tuple[int, int]:
        """(messages, tokens) of the session's chat history."""
        row = await self.vault.fetchone(
            f"""SELECT count(*), coalesce(sum(tokens), 0) FROM messages
                WHERE session = ? AND kind IN {HISTORY_KINDS!r}""",
            (session,),
        )
        assert row is not None
        return int(row[0]), int(row[1])

    async def restart_session(self, chat: int, *, summary: str | None, now_ms: int) -> int:
        """Close the open session of `chat` and open a new one (carrying `summary`)."""
        async with self.vault.transaction() as tx:
            await tx.execute(
                "UPDATE sessions SET ended_ms = ? WHERE chat = ? AND ended_ms IS NULL",
                (now_ms, chat),
            )
            sql = "INSERT INTO sessions (chat, started_ms, summary) VALUES (?, ?, ?) RETURNING id"
            return int(await tx.scalar(sql, (chat, now_ms, summary)))

    async def set_timezone(self, user: int, timezone: str) -> None:
        await self.vault.write("UPDATE users SET timezone = ? WHERE id = ?", (timezone, user))

    async def update_settings(self, user: int, changes: dict[str, Any]) -> dict[str, Any]:
        """Merge `changes` into the user's settings (a None value removes the key)."""
        async with self.vault.transaction() as tx:
            raw = await tx.scalar("SELECT settings FROM users WHERE id = ?", (user,))
            settings = json.loads(raw or "{}")
            for key, value in changes.items():
                if value is None:
                    settings.pop(key, None)
                else:
                    settings[key] = value
            await tx.execute(
                "UPDATE users SET settings = ? WHERE id = ?", (json.dumps(settings), user)
            )
        return dict(settings)

    async def get_user(self, user: UserRef) -> UserRow | None:
        row = await self.vault.fetchone(
            """SELECT id AS pk, channel, user_id, display_name, timezone, settings,
                      first_seen_ms, last_seen_ms FROM users WHERE channel = ? AND user_id = ?""",
            (user.channel, user.user_id),
        )
        if row is None:
            return None
        data = dict(row)
        data["settings"] = json.loads(data["settings"])
        return UserRow(**data)

    async def mark_unreachable(self, chat: ChatRef, now_ms: int) -> None:
        await self.vault.write(
            """UPDATE chats SET unreachable_ms = ?
               WHERE channel = ? AND chat_id = ? AND thread_id = ?""",
            (now_ms, chat.channel, chat.chat_id, chat.thread_id or ""),
        )

    async def latest_dm(self, user: UserRef) -> ChatRef | None:
        """The reachable direct-message chat `user` last wrote in (where a notice finds them)."""
        row = await self.vault.fetchone(
            """SELECT c.channel, c.chat_id, c.thread_id FROM messages m
               JOIN chats c ON c.id = m.chat
               WHERE m.user = (SELECT id FROM users WHERE channel = ? AND user_id = ?)
                 AND c.kind = 'dm' AND c.unreachable_ms IS NULL
               ORDER BY m.at_ms DESC LIMIT 1""",
            (user.channel, user.user_id),
        )
        if row is None:
            return None
        return ChatRef(channel=row[0], chat_id=row[1], thread_id=row[2] or None)
