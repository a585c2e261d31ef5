"""Access granted in chat: admins' allow/deny decisions and the strangers' pairing codes.

Why in the vault and not in `config.toml`: an admin lets a colleague in from chat, at once,
without a restart or a file edit, and the decision must survive a restart. The TOML lists stay
the operator's word and win on conflicts (the authorizer in `gateway/turns/auth.py` decides
that); this store only remembers what admins decided here.

A pairing code is a short handle for "the stranger who wrote to Iris": it is given to them in
the once-a-day not-authorized notice, and an admin types it (`/admin allow K7QH2M`) instead of
looking up a platform user id. A code grants nothing by itself — only an admin's allow does —
so it need not be secret, only unambiguous: six characters from an alphabet without look-alike
letters, one live code per user, expiring after `CODE_TTL_MS` (a new one comes with the next
notice).
"""

from __future__ import annotations

import secrets
import sqlite3
from dataclasses import dataclass
from enum import StrEnum

from vault.db import Vault

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
CODE_LENGTH = 6
CODE_TTL_MS = 7 * 86_400_000


class Access(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    channel: str
    user_id: str
    access: Access
    actor: str
    at_ms: int

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.user_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingCode:
    code: str
    channel: str
    user_id: str
    display_name: str
    created_ms: int
    expires_ms: int

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.user_id}"


def normalize_code(text: str) -> str:
    """What an admin typed, as stored: upper case, without spaces or dashes."""
    return "".join(ch for ch in text.upper() if ch not in " -")


def looks_like_code(text: str) -> bool:
    code = normalize_code(text)
    return len(code) == CODE_LENGTH and all(ch in CODE_ALPHABET for ch in code)


def _new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def _issue(
    raw: sqlite3.Connection, channel: str, user_id: str, name: str, now_ms: int, ttl_ms: int
) -> str:
    raw.execute("DELETE FROM pairing_codes WHERE expires_ms <= ?", (now_ms,))
    row = raw.execute(
        "SELECT code FROM pairing_codes WHERE channel = ? AND user_id = ?", (channel, user_id)
    ).fetchone()
    if row is not None:
        return str(row[0])
    while True:  # a collision among the few live codes is rare; try another
        code = _new_code()
        inserted = raw.execute(
            """INSERT INTO pairing_codes
                   (code, channel, user_id, display_name, created_ms, expires_ms)
               VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (code) DO NOTHING RETURNING code""",
            (code, channel, user_id, name, now_ms, now_ms + ttl_ms),
        ).fetchall()
        if inserted:
            return code


def _decide(
    raw: sqlite3.Connection, channel: str, user_id: str, access: Access, actor: str, now_ms: int
) -> None:
    raw.execute(
        """INSERT INTO access_grants (channel, user_id, access, actor, at_ms)
           VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (channel, user_id)
           DO UPDATE SET access = excluded.access, actor = excluded.actor,
                         at_ms = excluded.at_ms""",
        (channel, user_id, access.value, actor, now_ms),
    )
    raw.execute("DELETE FROM pairing_codes WHERE channel = ? AND user_id = ?", (channel, user_id))


class AccessStore:
    def __init__(self, vault: Vault, *, code_ttl_ms: int = CODE_TTL_MS) -> None:
        self.vault = vault
        self.code_ttl_ms = code_ttl_ms

    async def grants(self) -> list[Grant]:
        rows = await self.vault.fetchall(
            """SELECT channel, user_id, access, actor, at_ms FROM access_grants
               ORDER BY at_ms DESC, channel, user_id"""
        )
        return [
            Grant(
                channel=str(r["channel"]),
                user_id=str(r["user_id"]),
                access=Access(r["access"]),
                actor=str(r["actor"]),
                at_ms=int(r["at_ms"]),
            )
            for r in rows
        ]

    async def code_for(self, channel: str, user_id: str, display_name: str, now_ms: int) -> str:
        """The user's live pairing code, issued now if they have none."""
        ttl = self.code_ttl_ms
        return await self.vault.run(
            lambda raw: _issue(raw, channel, user_id, display_name, now_ms, ttl)
        )

    async def pending(self, now_ms: int) -> list[PendingCode]:
        rows = await self.vault.fetchall(
            """SELECT code, channel, user_id, display_name, created_ms, expires_ms
               FROM pairing_codes WHERE expires_ms > ? ORDER BY created_ms DESC""",
            (now_ms,),
        )
        return [PendingCode(**dict(r)) for r in rows]

    async def find_code(self, code: str, now_ms: int) -> PendingCode | None:
        row = await self.vault.fetchone(
            """SELECT code, channel, user_id, display_name, created_ms, expires_ms
               FROM pairing_codes WHERE code = ? AND expires_ms > ?""",
            (normalize_code(code), now_ms),
        )
        return None if row is None else PendingCode(**dict(row))

    async def decide(
        self, channel: str, user_id: str, access: Access, *, actor: str, now_ms: int
    ) -> None:
        """Record an admin's decision; the user's pending code is spent either way."""
        await self.vault.run(lambda raw: _decide(raw, channel, user_id, access, actor, now_ms))
