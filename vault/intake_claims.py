"""Per-chat claims on the intake, for replicas sharing one PostgreSQL vault.

Every replica saves what its channels receive (`vault/intake.py`), but a chat's saved messages
are run by one replica at a time, oldest first: the holder of the chat's row in
`intake_claims` (replica id + `lease_until`). The holder renews the lease while it runs the
chat and deletes the claim in the same transaction that finds the chat's last pending message
finished; a replica that dies stops renewing, and after the lease another one takes the chat
over and replays what is left (the record step's dedupe keys make that a resume).

Who may decide about a chat's claim: whoever holds `pg_try_advisory_xact_lock` on it for the
rest of its transaction. Claim, take-over and release all try that lock first and never wait
for it, so two replicas never block each other on a chat: the loser answers `BUSY` and a
NOTIFY on `INTAKE_HINTS` (sent at commit) tells the others to look again. That lock is also
what makes release safe: a holder that finds nothing left cannot release the chat while
another replica's admission of a new message to it is still deciding.

PostgreSQL only (advisory locks, `pg_notify`); the SQLite vault has one process and runs
every chat itself (`gateway/turns/intake.py`). Lease times are the app clock's epoch
milliseconds, so replicas' clocks must agree to well within a lease (NTP does).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.core.messages import Inbound, RejectedInbound
from vault.db import Vault
from vault.intake import Pending, admit_in, from_json
from vault.served import served_clause

INTAKE_HINTS = "iris_intake"  # the NOTIFY channel: "look at this chat" (JSON payload)
_LOCK_SEED = 0x696E74616B65  # "intake": a namespace for the chats' advisory lock keys


class Claim(StrEnum):
    NEW = "new"  # nobody held the chat: it is ours, its pending messages never ran
    TAKEN_OVER = "taken_over"  # an expired lease (or our own from a previous process): ours
    MINE = "mine"  # we hold it already and our run of it goes on
    HELD = "held"  # another replica holds a live lease: it runs the chat
    BUSY = "busy"  # another replica is deciding about the chat right now


OURS = (Claim.NEW, Claim.TAKEN_OVER, Claim.MINE)


class Next(StrEnum):
    RUN = "run"  # the oldest pending message of the chat: run it
    RELEASED = "released"  # nothing left: the claim is gone
    LOST = "lost"  # another replica took the chat over (our lease had expired)
    BUSY = "busy"  # nothing left, but another replica is deciding about the chat: wait


@dataclass(frozen=True, slots=True)
class Admitted:
    rows: list[tuple[int, Inbound]]
    claims: dict[str, Claim]  # per chat of `rows`; empty when not claiming


@dataclass(frozen=True, slots=True)
class Step:
    state: Next
    row: Pending | None = None
    rejected: list[int] = field(default_factory=list)  # unreadable rows marked on the way


def hint(raw: sqlite3.Connection, chat_key: str, holder: str = "") -> None:
    """Tell every replica's listener to look at `chat_key` (delivered at commit)."""
    payload = json.dumps({"chat": chat_key, "holder": holder})
    raw.execute("SELECT pg_notify(?, ?)", (INTAKE_HINTS, payload))


def _try_lock(raw: sqlite3.Connection, chat_key: str) -> bool:
    row = raw.execute(
        "SELECT pg_try_advisory_xact_lock(hashtextextended(?, ?))", (chat_key, _LOCK_SEED)
    ).fetchone()
    return bool(row is not None and row[0])


def claim_in(
    raw: sqlite3.Connection, chat_key: str, *, replica: str, running: bool, now_ms: int,
    lease_until: int,
) -> tuple[Claim, str]:  # fmt: skip
    """Claim `chat_key` for `replica`; the outcome and the holder. `running`: this process
    runs the chat now (a claim of ours it does not run is a previous process's: taken over)."""
    if not _try_lock(raw, chat_key):
        return Claim.BUSY, ""
    row = raw.execute(
        "SELECT replica, lease_until FROM intake_claims WHERE chat_key = ?", (chat_key,)
    ).fetchone()
    if row is None:
        raw.execute(
            """INSERT INTO intake_claims (chat_key, replica, lease_until, claimed_ms)
               VALUES (?, ?, ?, ?)""",
            (chat_key, replica, lease_until, now_ms),
        )
        return Claim.NEW, replica
    holder, until = str(row[0]), int(row[1])
    if holder != replica and until >= now_ms:
        return Claim.HELD, holder
    if holder == replica and running:
        raw.execute(
            "UPDATE intake_claims SET lease_until = ? WHERE chat_key = ?", (lease_until, chat_key)
        )
        return Claim.MINE, replica
    raw.execute(
        """UPDATE intake_claims SET replica = ?, lease_until = ?, claimed_ms = ?
           WHERE chat_key = ?""",
        (replica, lease_until, now_ms, chat_key),
    )
    return Claim.TAKEN_OVER, replica


def next_in(
    raw: sqlite3.Connection, chat_key: str, *, replica: str, finished: int | None,
    lease_until: int,
) -> Step:  # fmt: skip
    """The holder's next move: forget the message it finished, renew the lease, and take the
    chat's oldest pending message — or release the chat when none is left."""
    if finished is not None:
        raw.execute("DELETE FROM intake WHERE id = ?", (finished,))
    renewed = raw.execute(
        "UPDATE intake_claims SET lease_until = ? WHERE chat_key = ? AND replica = ?",
        (lease_until, chat_key, replica),
    ).rowcount
    if not renewed:
        return Step(Next.LOST)
    rejected: list[int] = []
    while True:
        row = raw.execute(
            """SELECT id, payload, received_ms FROM intake
               WHERE chat_key = ? AND state = 'pending' ORDER BY id LIMIT 1""",
            (chat_key,),
        ).fetchone()
        if row is not None:
            try:
                pending = Pending(int(row[0]), int(row[2]), from_json(str(row[1])))
            except ValueError as exc:
                raw.execute(
                    "UPDATE intake SET state = 'rejected', reason = ? WHERE id = ?",
                    (str(exc)[:300], row[0]),
                )
                rejected.append(int(row[0]))
                continue
            return Step(Next.RUN, pending, rejected)
        if not _try_lock(raw, chat_key):
            return Step(Next.BUSY, None, rejected)
        released = raw.execute(
            """DELETE FROM intake_claims WHERE chat_key = ? AND replica = ?
               AND NOT EXISTS (SELECT 1 FROM intake WHERE chat_key = ? AND state = 'pending')""",
            (chat_key, replica, chat_key),
        ).rowcount
        if released:
            return Step(Next.RELEASED, None, rejected)
        # A message committed between the SELECT and the DELETE: take it.


class IntakeClaims:
    """The claims' reads and writes, each one batched write (`Vault.run`)."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def admit(
        self, items: Sequence[Inbound | RejectedInbound], *, replica: str, running: set[str],
        now_ms: int, lease_until: int, claim: bool = True,
    ) -> Admitted:  # fmt: skip
        """Save a batch (`IntakeStore.admit`) and, in the same transaction, claim each of its
        chats. A chat left to others (held, busy, or not claimed: `claim=False` when
        stopping) gets a hint, so its holder or a free replica looks at once."""

        def body(raw: sqlite3.Connection) -> Admitted:
            rows = admit_in(raw, items, now_ms)
            claims: dict[str, Claim] = {}
            for chat_key in dict.fromkeys(inbound.chat.key for _, inbound in rows):
                if not claim:
                    hint(raw, chat_key)
                    continue
                outcome, holder = claim_in(
                    raw, chat_key, replica=replica, running=chat_key in running,
                    now_ms=now_ms, lease_until=lease_until,
                )  # fmt: skip
                claims[chat_key] = outcome
                if outcome not in OURS:
                    hint(raw, chat_key, holder)
            return Admitted(rows, claims)

        return await self.vault.run(body)

    async def claim(
        self, chats: Sequence[str], *, replica: str, running: set[str], now_ms: int,
        lease_until: int,
    ) -> dict[str, Claim]:  # fmt: skip
        def body(raw: sqlite3.Connection) -> dict[str, Claim]:
            return {
                chat_key: claim_in(
                    raw, chat_key, replica=replica, running=chat_key in running,
                    now_ms=now_ms, lease_until=lease_until,
                )[0]
                for chat_key in chats
            }  # fmt: skip

        return await self.vault.run(body)

    async def next(
        self, chat_key: str, *, replica: str, finished: int | None, lease_until: int
    ) -> Step:
        return await self.vault.run(
            lambda raw: next_in(
                raw, chat_key, replica=replica, finished=finished, lease_until=lease_until
            )
        )

    async def renew(self, chats: Sequence[str], *, replica: str, lease_until: int) -> int:
        """Extend the lease of the chats `replica` still holds among `chats`; how many."""
        listed = json.dumps(list(chats))
        return await self.vault.run(
            lambda raw: (
                raw.execute(
                    """UPDATE intake_claims SET lease_until = ?
                   WHERE replica = ? AND chat_key IN (SELECT value FROM json_each(?))""",
                    (lease_until, replica, listed),
                ).rowcount
            )
        )

    async def release(self, chats: Sequence[str], *, replica: str) -> None:
        """Give up `chats` (stopping) with whatever is still pending in them, and hint every
        replica to take them now rather than after the lease."""
        listed = json.dumps(list(chats))

        def body(raw: sqlite3.Connection) -> None:
            gone = raw.execute(
                """DELETE FROM intake_claims
                   WHERE replica = ? AND chat_key IN (SELECT value FROM json_each(?))
                   RETURNING chat_key""",
                (replica, listed),
            ).fetchall()
            for row in gone:
                hint(raw, str(row[0]))

        await self.vault.run(body)

    async def claimable(
        self, *, replica: str, now_ms: int, limit: int = 200, channels: Sequence[str] | None = None
    ) -> list[str]:
        """Chats with pending messages that no live replica holds (nobody, an expired lease,
        or our own id from a previous process), oldest message first; with `channels`, only
        theirs (in the query: the limit counts only chats this replica could run)."""
        only, names = served_clause("i.channel", channels)
        rows = await self.vault.fetchall(
            f"""SELECT i.chat_key FROM intake i
               LEFT JOIN intake_claims c ON c.chat_key = i.chat_key
               WHERE i.state = 'pending'
                 AND (c.chat_key IS NULL OR c.lease_until < ? OR c.replica = ?){only}
               GROUP BY i.chat_key ORDER BY min(i.id) LIMIT ?""",
            (now_ms, replica, *names, limit),
        )
        return [str(r[0]) for r in rows]
