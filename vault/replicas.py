"""The replicas' heartbeats: who runs on this vault, since when, what it leads, what it counted.

Each `iris run` sharing a PostgreSQL vault rewrites its row every few seconds
(`gateway/app/replicas.py`): its id, start, last beat, the leaderships it holds and a snapshot
of its in-memory counters (`Metrics.counter_values`). Usage figures aggregate the rows seen in
the last minute, so they speak for the whole deployment rather than for whichever replica the
load balancer picked; rows of replicas gone for a day are dropped by the next beat. On SQLite
there is one replica and no heartbeat.

A beat also says whether someone else wrote the row since this replica's previous beat: a
second live process under the same id (each beat writes its own start time; a restart after a
crash is no such case, as its first beat has no previous one to compare with).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from vault.db import Vault

Counters = dict[str, dict[str, float]]  # counter name -> label values joined by "," -> value
FORGET_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Beat:
    id: str
    started_ms: int
    last_seen_ms: int
    leaderships: tuple[str, ...]
    counters: Counters


class ReplicaStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def beat(self, beat: Beat, previous_ms: int | None = None) -> int | None:
        """Write `beat`; the start time of another process that wrote this id's row since
        `previous_ms` (this replica's previous beat), else None."""
        leaderships, counters = json.dumps(sorted(beat.leaderships)), json.dumps(beat.counters)
        forget_before = beat.last_seen_ms - FORGET_MS

        def body(raw: sqlite3.Connection) -> int | None:
            found = raw.execute(
                "SELECT started_ms, last_seen_ms FROM replicas WHERE id = ?", (beat.id,)
            ).fetchone()
            raw.execute(
                """INSERT INTO replicas (id, started_ms, last_seen_ms, leaderships, counters)
                   VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (id) DO UPDATE SET started_ms = excluded.started_ms,
                       last_seen_ms = excluded.last_seen_ms,
                       leaderships = excluded.leaderships, counters = excluded.counters""",
                (beat.id, beat.started_ms, beat.last_seen_ms, leaderships, counters),
            )
            raw.execute("DELETE FROM replicas WHERE last_seen_ms < ?", (forget_before,))
            # Since our previous beat wrote our start time, another one there is another writer.
            if found is None or previous_ms is None or int(found[0]) == beat.started_ms:
                return None
            return int(found[0])

        return await self.vault.run(body)

    async def seen_since(self, since_ms: int) -> list[Beat]:
        rows = await self.vault.fetchall(
            """SELECT id, started_ms, last_seen_ms, leaderships, counters FROM replicas
               WHERE last_seen_ms >= ? ORDER BY id""",
            (since_ms,),
        )
        return [
            Beat(
                id=str(r[0]),
                started_ms=int(r[1]),
                last_seen_ms=int(r[2]),
                leaderships=tuple(json.loads(r[3])),
                counters=json.loads(r[4]),
            )
            for r in rows
        ]


def total(counters: Iterable[Counters]) -> Counters:
    """The counters of several replicas added up, series by series."""
    summed: Counters = {}
    for one in counters:
        for name, series in one.items():
            into = summed.setdefault(name, {})
            for labels, value in series.items():
                into[labels] = into.get(labels, 0.0) + value
    return summed
