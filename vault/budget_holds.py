"""Budgets shared by replicas on PostgreSQL: reservations of calls in flight, and settling them.

On SQLite one process owns the vault and keeps its budget totals and reservations in memory
(`gateway/limits/budgets.py`). Replicas sharing a PostgreSQL vault cannot: each one's calls
must count against the same caps. So there, every model call

- reserves in one short transaction (`reserve`): it reads each meter's tally — what settled
  calls spent (the spend tables, `vault/spend.py`) and what calls in flight reserved
  (`budget_holds`, `vault/schema_budget_holds.py`) — hands the tallies to the caller's rule,
  and inserts its hold only if the rule admits it;
- settles in another (`settle_soon`, write-behind like the SQLite path's bookkeeping): deletes
  its hold and adds its real usage to the spend tables, so no reader sees both or neither, and
  sends a NOTIFY on `BUDGET_HINTS` so calls waiting on another replica look again.

Every transaction that touches these tables here first takes one transaction-scoped advisory
lock (`BUDGET_LOCK`): reservations are judged one at a time across replicas (two racing for
the last of a budget cannot both see it free), and spend rows are only ever locked by a holder
of it, so batches that also settle or count refusals cannot deadlock over them. A tally is one
statement, one snapshot. A hold whose replica died stops counting at `expires_ms` and is
deleted by the next reservation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from vault.spend import SpendStore, add_spend

BUDGET_HINTS = "iris_budget"  # the NOTIFY channel: "a hold was settled, look again"
BUDGET_LOCK = 0x69726973_62756467  # pg_advisory_xact_lock key: "iris" + "budg"


@dataclass(frozen=True, slots=True)
class Windows:
    """The windows a call counts in: the payer's local day and month (None without a payer)
    and everyone's UTC day."""

    user_pk: int | None
    day: str | None
    month: str | None
    global_day: str


@dataclass(frozen=True, slots=True)
class Tally:
    committed: int = 0  # spent by settled calls
    reserved: int = 0  # estimates of the calls in flight
    in_flight: int = 0


@dataclass(frozen=True, slots=True)
class Tallies:
    tokens_day: Tally
    usd_day: Tally
    usd_month: Tally
    global_day: Tally


@dataclass(frozen=True, slots=True)
class NewHold:
    hold: str
    owner: str  # the replica making the call
    tokens: int
    usd_micros: int
    expires_ms: int


_HELD = "FROM budget_holds WHERE expires_ms > :now AND "
_TALLY = f"""SELECT
    (SELECT coalesce(sum(tokens), 0) FROM spend_user_days WHERE user = :user AND day = :day),
    (SELECT coalesce(sum(tokens), 0) {_HELD} user = :user AND day = :day),
    (SELECT coalesce(sum(usd_micros), 0) FROM spend_user_days WHERE user = :user AND day = :day),
    (SELECT coalesce(sum(usd_micros), 0) {_HELD} user = :user AND day = :day),
    (SELECT count(*) {_HELD} user = :user AND day = :day),
    (SELECT coalesce(sum(usd_micros), 0) FROM spend_user_days
        WHERE user = :user AND day BETWEEN :first AND :last),
    (SELECT coalesce(sum(usd_micros), 0) {_HELD} user = :user AND month = :month),
    (SELECT count(*) {_HELD} user = :user AND month = :month),
    (SELECT coalesce(sum(usd_micros), 0) FROM spend_global_days WHERE day = :global_day),
    (SELECT coalesce(sum(usd_micros), 0) {_HELD} global_day = :global_day),
    (SELECT count(*) {_HELD} global_day = :global_day)"""


# The reservation's tally also deletes the expired holds (it never counts them anyway).
_PURGE_AND_TALLY = "WITH expired AS (DELETE FROM budget_holds WHERE expires_ms <= :now) " + _TALLY


def _tallies(raw: sqlite3.Connection, windows: Windows, now_ms: int, sql: str = _TALLY) -> Tallies:
    month = windows.month or ""
    row = raw.execute(
        sql,
        {
            "now": now_ms,
            "user": windows.user_pk,
            "day": windows.day,
            "month": windows.month,
            "first": f"{month}-00",
            "last": f"{month}-99",
            "global_day": windows.global_day,
        },
    ).fetchone()
    v = [int(x) for x in row] if row is not None else [0] * 11
    return Tallies(
        tokens_day=Tally(v[0], v[1], v[4]),
        usd_day=Tally(v[2], v[3], v[4]),
        usd_month=Tally(v[5], v[6], v[7]),
        global_day=Tally(v[8], v[9], v[10]),
    )


def _lock(raw: sqlite3.Connection) -> None:
    raw.execute("SELECT pg_advisory_xact_lock(?)", (BUDGET_LOCK,))


def _hint(raw: sqlite3.Connection) -> None:
    raw.execute("SELECT pg_notify(?, '')", (BUDGET_HINTS,))


class SharedSpendStore(SpendStore):
    """`SpendStore` for replicas sharing a PostgreSQL vault, with the holds of calls in flight."""

    async def reserve(
        self, windows: Windows, hold: NewHold, now_ms: int, admit: Callable[[Tallies], bool]
    ) -> tuple[Tallies, bool]:
        """The tallies of `windows` (holds expired at `now_ms` left out and deleted), and
        whether `admit(tallies)` let `hold` be inserted; committed when this returns.
        `admit` runs inside the transaction: a pure function, quick."""

        def body(raw: sqlite3.Connection) -> tuple[Tallies, bool]:
            _lock(raw)  # before the tally: its snapshot then sees every earlier reservation
            tallies = _tallies(raw, windows, now_ms, _PURGE_AND_TALLY)
            if not admit(tallies):
                return tallies, False
            raw.execute(
                """INSERT INTO budget_holds (hold, user, day, month, global_day, tokens,
                       usd_micros, owner, expires_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    hold.hold, windows.user_pk, windows.day, windows.month, windows.global_day,
                    hold.tokens, hold.usd_micros, hold.owner, hold.expires_ms,
                ),
            )  # fmt: skip
            return tallies, True

        return await self.vault.run(body)

    async def tallies(self, windows: Windows, now_ms: int) -> Tallies:
        """The tallies of `windows` as every replica sees them now (holds live at `now_ms`)."""
        return await self.vault.read(lambda raw: _tallies(raw, windows, now_ms))

    def settle_soon(
        self, hold: str, *, user: tuple[int, str] | None, global_day: str, tokens: int,
        usd_micros: int,
    ) -> None:  # fmt: skip
        """Replace `hold` with what the call spent (write-behind), and wake waiting replicas."""

        def settle(raw: sqlite3.Connection) -> None:
            _lock(raw)
            raw.execute("DELETE FROM budget_holds WHERE hold = ?", (hold,))
            if tokens:
                add_spend(raw, user, global_day, tokens, usd_micros, 0)
            _hint(raw)

        self.vault.run_soon(settle, "model spend")

    def _prepare(self, raw: sqlite3.Connection) -> None:
        _lock(raw)  # every writer of the spend tables takes the one lock first: no deadlocks
