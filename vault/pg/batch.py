"""The writer's batch on PostgreSQL: `vault.batch.write_batch` with fewer round trips.

Same transaction, same outcomes: one `BEGIN … COMMIT` for the batch, each body of a batch of
several in a SAVEPOINT of its own, so a failing body loses only its own statements. On SQLite
the savepoint statements cost nothing; here each is a round trip to the server, and they were a
third of the statements a message costs a replica (two per body: `SAVEPOINT`, `RELEASE`). So
the statements between two bodies go as one simple query — `BEGIN` with the first `SAVEPOINT`,
each `RELEASE` with the next `SAVEPOINT` (or with `COMMIT` after the last body), a failed body's
`ROLLBACK TO` likewise — which PostgreSQL runs in order and stops at the first error.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from vault.batch import Outcome, SyncBody, _failure
from vault.pg.connection import PgRaw, mapped_errors


def _send(raw: PgRaw, *statements: str) -> None:
    """Statements without parameters, in one round trip."""
    with mapped_errors():
        raw.pg.execute("; ".join(statements).encode())


def write_batch(raw: sqlite3.Connection, bodies: list[SyncBody[Any]]) -> list[Outcome]:
    """One write transaction for all `bodies`, in order; a lone body needs no savepoint."""
    pg: PgRaw = raw  # type: ignore[assignment]  # the writer's connection (`vault/pg/vault.py`)
    alone = len(bodies) == 1
    outcomes: list[Outcome] = []
    _send(pg, "BEGIN", *(() if alone else ("SAVEPOINT body",)))
    try:
        for i, body in enumerate(bodies):
            last = i == len(bodies) - 1
            after = ("COMMIT",) if last else ("SAVEPOINT body",)
            try:
                value = body(raw)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                if not pg.in_transaction:
                    raise  # the whole transaction is gone: the batch fails as a whole
                outcomes.append((False, _failure(exc, "write")))
                if alone:
                    _send(pg, "ROLLBACK")  # its only body failed: nothing to keep
                else:  # only this body's statements are undone
                    _send(pg, "ROLLBACK TO body", "RELEASE body", *after)
                continue
            outcomes.append((True, value))
            _send(pg, *(after if alone else ("RELEASE body", *after)))
    except BaseException:
        if pg.in_transaction:
            _send(pg, "ROLLBACK")
        raise
    return outcomes
