"""The knowledge rescan of replicas sharing one real PostgreSQL vault (and one documents
directory): every replica runs the rescan loop, one rescans each slot of `rescan_seconds`
(the periodic claim); a replica that did not rescan drops its retrieval caches once it sees
the shared index changed; a scan asked for directly (`/context refresh`) runs on any replica."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.knowledge.indexer import RESCAN_JOB, Indexer, ScanReport
from gateway.knowledge.rules import PathRules
from gateway.knowledge.settings import KnowledgeSection
from tests.gateway.knowledge.support import write
from vault.knowledge import KnowledgeStore
from vault.migrations import migrate
from vault.periodic import PeriodicRuns
from vault.pg.vault import PgVault

PERIOD_MS = 60_000
SETTINGS = KnowledgeSection(documents=("docs/*.md",), rescan_seconds=PERIOD_MS / 1000)


class Rescanner(Indexer):
    """The real indexer; each loop's turn is put on `done` as (replica, scanned) once over."""

    def __init__(self, name: str, done: asyncio.Queue[tuple[str, bool]], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.name, self.done = name, done
        self.scanned: list[int] = []  # the clock at each scan
        self.invalidated = 0  # how often its retrieval caches were dropped
        self.on_change = self._invalidate

    def _invalidate(self) -> None:
        self.invalidated += 1

    async def scan(self, *, embed: bool = True) -> ScanReport:
        self.scanned.append(self.clock.now_ms())
        return await super().scan(embed=embed)

    async def follow(self) -> None:
        await super().follow()
        self.done.put_nowait((self.name, bool(self.scanned) and self.scanned[-1] == self.now))

    @property
    def now(self) -> int:
        return self.clock.now_ms()


@asynccontextmanager
async def rescanners(
    url: str, base: Path, clock: ManualClock, names: tuple[str, ...]
) -> AsyncIterator[tuple[asyncio.Queue[tuple[str, bool]], list[Rescanner]]]:
    done: asyncio.Queue[tuple[str, bool]] = asyncio.Queue()
    async with AsyncExitStack() as stack:
        found = []
        for name in names:
            vault = await stack.enter_async_context(PgVault(url))
            await migrate(vault)
            indexer = Rescanner(
                name, done, store=KnowledgeStore(vault), settings=SETTINGS, base=base,
                rules=PathRules({}, {}), clock=clock, periodic=PeriodicRuns(vault, name),
            )  # fmt: skip
            found.append(indexer)
        yield done, found


async def test_two_replicas_rescan_once_per_slot(pg_url: str, tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n\nThe first document.")
    clock = ManualClock(1_000 * PERIOD_MS + 5_000)  # 5 s into a slot
    first = clock.now_ms() - 5_000
    slots = [first + n * PERIOD_MS for n in range(3)]
    async with rescanners(pg_url, tmp_path, clock, ("r1", "r2")) as (done, indexers):
        async with asyncio.TaskGroup() as tg:
            running = [tg.create_task(i.run()) for i in indexers]
            for n, slot in enumerate(slots):
                if n:
                    write(tmp_path, f"{n}.md", f"# Doc {n}\n\nWritten before slot {n}.")
                    clock.set(slot)
                turns = [await done.get() for _ in indexers]
                assert sorted(name for name, _ in turns) == ["r1", "r2"]
                assert sorted(scanned for _, scanned in turns) == [False, True]
            for task in running:
                task.cancel()
        scans = sorted(at for i in indexers for at in i.scanned)
        assert scans == [first + 5_000, *slots[1:]]  # at the start (mid-slot), then each slot
        rows = await indexers[0].store.vault.fetchall(
            "SELECT slot, replica FROM periodic_runs WHERE name = ? ORDER BY slot", (RESCAN_JOB,)
        )
        assert [r[0] for r in rows] == slots
        winners = {at: i.name for i in indexers for at in i.scanned}
        assert [r[1] for r in rows] == [winners[at] for at in scans]
        live = await indexers[0].store.file_states()
        assert sorted(live) == ["docs/1.md", "docs/2.md", "docs/a.md"]


async def test_a_replica_that_did_not_rescan_drops_its_caches_once_the_index_changed(
    pg_url: str, tmp_path: Path
) -> None:
    write(tmp_path, "a.md", "# A\n\nThe first document.")
    clock = ManualClock(1_000 * PERIOD_MS)
    async with rescanners(pg_url, tmp_path, clock, ("r1", "r2")) as (_, [one, two]):
        await one.scan()  # `/context refresh` on r1: no claim, it scans now
        await two.follow()
        assert two.invalidated == 1  # its first look
        await two.follow()
        assert two.invalidated == 1  # nothing changed since
        write(tmp_path, "b.md", "# B\n\nA second document.")
        await one.scan()
        await two.follow()
        assert two.invalidated == 2
        assert two.scanned == []  # r2 read the change from the vault, not from the files
