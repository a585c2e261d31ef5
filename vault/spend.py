"""Model spend per user and day, everyone's per UTC day, and the once-per-window notices.

On SQLite the spending limits (`gateway/limits/`) keep the running totals in memory and read
them from here once per user per process (on PostgreSQL replicas read them at every call
instead, beside the reservations of calls in flight: `vault/budget_holds.py`); every settled
call is added here write-behind (`Vault.run_soon`): it commits with the next batch, and before
the vault closes, so a restart resumes from what was spent, while a turn never waits on this
bookkeeping. The schema and why it is shaped this way: `vault/schema_limits.py`.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from vault.db import Vault


@dataclass(frozen=True, slots=True)
class Spent:
    calls: int = 0
    tokens: int = 0
    usd_micros: int = 0
    refusals: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UserSpend:
    """A user's key (`telegram:123`; None when the id names no user), their spend on one local
    day and in the month that day belongs to."""

    user_key: str | None
    day: Spent
    month: Spent


@dataclass(frozen=True, slots=True, kw_only=True)
class UserDay:
    user_pk: int
    user_key: str
    timezone: str | None
    day: str
    spent: Spent


_TOTALS = (
    "count(*), coalesce(sum(calls), 0), coalesce(sum(tokens), 0), "
    "coalesce(sum(usd_micros), 0), coalesce(sum(refusals), 0)"
)


def _spent(row: tuple[int, ...] | None) -> Spent:
    if row is None or not row[0]:
        return Spent()
    return Spent(int(row[1]), int(row[2]), int(row[3]), int(row[4]))


def _add_user_day(
    raw: sqlite3.Connection,
    user: int,
    day: str,
    tokens: int,
    usd: int,
    refusals: int,
    calls: int | None = None,
) -> None:
    """Add to the user's row for `day`; `calls` defaults to one settled call (none for a
    refusal)."""
    raw.execute(
        """INSERT INTO spend_user_days (user, day, calls, tokens, usd_micros, refusals)
           VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (user, day) DO UPDATE SET calls = calls + excluded.calls,
               tokens = tokens + excluded.tokens, usd_micros = usd_micros + excluded.usd_micros,
               refusals = refusals + excluded.refusals""",
        (user, day, (0 if refusals else 1) if calls is None else calls, tokens, usd, refusals),
    )


def _add_global_day(
    raw: sqlite3.Connection, day: str, tokens: int, usd: int, refusals: int
) -> None:
    raw.execute(
        """INSERT INTO spend_global_days (day, calls, tokens, usd_micros, refusals)
           VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (day) DO UPDATE SET calls = calls + excluded.calls,
               tokens = tokens + excluded.tokens, usd_micros = usd_micros + excluded.usd_micros,
               refusals = refusals + excluded.refusals""",
        (day, 0 if refusals else 1, tokens, usd, refusals),
    )


def add_spend(
    raw: sqlite3.Connection,
    user: tuple[int, str] | None,
    global_day: str,
    tokens: int,
    usd: int,
    refusals: int,
) -> None:
    """Add to the user's local day (`user`: pk and day), if any, and to everyone's."""
    if user is not None:
        _add_user_day(raw, user[0], user[1], tokens, usd, refusals)
    _add_global_day(raw, global_day, tokens, usd, refusals)


class SpendStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def user(self, user_pk: int, day: str) -> UserSpend:
        """The user's spend on local `day` (`YYYY-MM-DD`) and in that day's month."""
        month = day[:7]

        def read(raw: sqlite3.Connection) -> UserSpend:
            who = raw.execute("SELECT channel, user_id FROM users WHERE id = ?", (user_pk,))
            found = who.fetchone()
            on_day = raw.execute(
                f"SELECT {_TOTALS} FROM spend_user_days WHERE user = ? AND day = ?",
                (user_pk, day),
            ).fetchone()
            in_month = raw.execute(
                f"""SELECT {_TOTALS} FROM spend_user_days
                    WHERE user = ? AND day BETWEEN ? AND ?""",
                (user_pk, f"{month}-00", f"{month}-99"),
            ).fetchone()
            return UserSpend(
                user_key=f"{found[0]}:{found[1]}" if found else None,
                day=_spent(on_day),
                month=_spent(in_month),
            )

        return await self.vault.read(read)

    async def everyone(self, day: str) -> Spent:
        """Everyone's spend on UTC `day`."""
        row = await self.vault.fetchone(
            f"SELECT {_TOTALS} FROM spend_global_days WHERE day = ?", (day,)
        )
        return _spent(tuple(row) if row is not None else None)

    def add_soon(
        self, *, user: tuple[int, str] | None, global_day: str, tokens: int, usd_micros: int
    ) -> None:
        """Add one settled call (write-behind): to the user's local day, and to everyone's."""

        def add(raw: sqlite3.Connection) -> None:
            self._prepare(raw)
            add_spend(raw, user, global_day, tokens, usd_micros, 0)

        self.vault.run_soon(add, "model spend")

    def refused_soon(self, *, user: tuple[int, str] | None, global_day: str) -> None:
        """Count one refused call (write-behind), for `/admin budget`."""

        def add(raw: sqlite3.Connection) -> None:
            self._prepare(raw)
            add_spend(raw, user, global_day, 0, 0, 1)

        self.vault.run_soon(add, "budget refusal")

    async def follow_day(self, user_pk: int, from_day: str, to_day: str) -> None:
        """The user's spend on local `from_day` moved to `to_day` (added to what is there): a
        new time zone whose date is another one must not start a fresh day's budget."""
        if from_day == to_day:
            return

        def move(raw: sqlite3.Connection) -> None:
            self._prepare(raw)
            row = raw.execute(
                "SELECT calls, tokens, usd_micros, refusals FROM spend_user_days "
                "WHERE user = ? AND day = ?",
                (user_pk, from_day),
            ).fetchone()
            if row is None:
                return
            calls, tokens, usd, refusals = (int(v) for v in row)
            _add_user_day(raw, user_pk, to_day, tokens, usd, refusals, calls=calls)
            raw.execute(
                "DELETE FROM spend_user_days WHERE user = ? AND day = ?", (user_pk, from_day)
            )

        await self.vault.run(move)

    def _prepare(self, raw: sqlite3.Connection) -> None:
        """Run first in every transaction that writes the spend tables (nothing here)."""

    async def first_notice(self, user_pk: int, window: str, now_ms: int) -> bool:
        """True the first time a user is told about `window` (e.g. `user_usd_per_day:…`)."""
        changed = await self.vault.write_rowcount(
            "INSERT OR IGNORE INTO budget_notices (user, window, at_ms) VALUES (?, ?, ?)",
            (user_pk, window, now_ms),
        )
        return changed > 0

    async def recent_days(self, since_day: str) -> list[UserDay]:
        """Every user's spend rows from `since_day` on (each user's local dates), biggest first."""
        rows = await self.vault.fetchall(
            """SELECT s.user, u.channel, u.user_id, u.timezone, s.day, s.calls, s.tokens,
                      s.usd_micros, s.refusals
               FROM spend_user_days s JOIN users u ON u.id = s.user
               WHERE s.day >= ? ORDER BY s.usd_micros DESC, s.tokens DESC""",
            (since_day,),
        )
        return [
            UserDay(
                user_pk=int(r[0]),
                user_key=f"{r[1]}:{r[2]}",
                timezone=r[3],
                day=str(r[4]),
                spent=Spent(int(r[5]), int(r[6]), int(r[7]), int(r[8])),
            )
            for r in rows
        ]
