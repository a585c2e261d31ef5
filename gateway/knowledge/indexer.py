"""Keeping the vault's index in step with the files: scan, parse, write, retire, embed.

A scan lists the files the `[context] documents` globs match (in a thread), reads only those
whose mtime or size changed (all of them on the first scan of a process, since the rules may
have changed), parses them in a thread, and writes the versions whose content hash or metadata
changed in batches. A file that is gone, no longer matched, or can no longer be read as text is
retired: its chunks go, so it is never found or injected again. Each skipped file is logged
once per version, naming it and why. Scans never overlap (`/context refresh` and the
background rescan share a lock). With an embedder, the chunks that have no cached vector are
embedded after the index is written, outside that lock (the model runs off the event loop, in
the embedder): searches use the vectors that exist, and lexical retrieval covers the rest.

Replicas sharing a PostgreSQL vault share its index, and read the documents from the same
directory (a shared volume): the background rescan then falls on slots of `rescan_seconds`,
each claimed first (`vault/periodic.py`), so one replica rescans per slot; every replica then
looks whether the index changed (`KnowledgeStore.fingerprint`) and drops its retrieval caches
if it did. `/context refresh` rescans at once on any replica, claiming nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway.core.embedding import Embedder
from gateway.core.errors import VaultError
from gateway.core.ports import Clock
from gateway.knowledge.parse import Parsed, Skipped, parse
from gateway.knowledge.rules import PathRules
from gateway.knowledge.settings import KnowledgeSection
from vault.knowledge import DocumentRow, DocumentVersion, KnowledgeStore
from vault.periodic import PeriodicRuns

log = logging.getLogger(__name__)

WRITE_BATCH = 50
READ_BATCH = 100
EMBED_BATCH = 32
_GLOB_CHARS = set("*?[")
RESCAN_JOB = "knowledge rescan"  # its name in `periodic_runs`


@dataclass(slots=True)
class ScanReport:
    indexed: int = 0
    unchanged: int = 0
    retired: int = 0
    skipped: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # paths of the new versions indexed
    # Every path indexed / retired by this scan, the first index's too (`changed` leaves
    # those out: a first index is not a change).
    indexed_paths: list[str] = field(default_factory=list)
    retired_paths: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FileStat:
    path: Path
    mtime_ns: int
    size: int
    # A symbolic link to a hidden file (the config's `.env`, say) or to one outside the glob's
    # folder: whatever it reaches would go in front of the model, so it is skipped, never read.
    outside: bool = False


def _split_glob(glob: str) -> tuple[str, str]:
    parts = glob.split("/")
    literal = []
    for part in parts:
        if _GLOB_CHARS & set(part):
            break
        literal.append(part)
    rest = "/".join(parts[len(literal) :])
    return "/".join(literal), rest


def expand(base: Path, glob: str) -> list[Path]:
    """The files a glob matches (relative to `base`; absolute globs are taken as they are)."""
    return [path for path, _ in _matches(base, glob)]


def _matches(base: Path, glob: str) -> list[tuple[Path, bool]]:
    """(file, whether it lies within the glob's own folder once links are followed)."""
    root_part, rest = _split_glob(glob)
    root = base / root_part if root_part else base
    if not rest:
        return [(root, True)] if root.is_file() else []  # named on its own: the operator's
    try:
        real_root = root.resolve()
        return [(p, _inside(p, real_root)) for p in sorted(root.glob(rest)) if p.is_file()]
    except OSError:
        return []


def _inside(path: Path, real_root: Path) -> bool:
    """Whether `path`, links followed, stays in `real_root` and is no hidden file: a glob with
    no folder of its own (`**/*.md`) has the config's folder as its root, where `.env` is."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a link loop
        return False
    return real.is_relative_to(real_root) and not real.name.startswith(".")


def list_files(base: Path, globs: Sequence[str]) -> dict[str, FileStat]:
    found: dict[str, FileStat] = {}
    for glob in globs:
        for path, inside in _matches(base, glob):
            rel = Path(os.path.relpath(path, base)).as_posix()
            try:
                st = path.stat()
            except OSError:
                continue
            found.setdefault(rel, FileStat(path, st.st_mtime_ns, st.st_size, outside=not inside))
    return found


def read_document(
    rel: str, st: FileStat, rules: PathRules, settings: KnowledgeSection
) -> Parsed | Skipped:
    """Read and parse one listed file (blocking; its size is checked before reading)."""
    if st.outside:  # a symbolic link out of the folder (to `.env`, say): never read
        return Skipped("a link to a hidden file or one outside the documents' folder")
    limit = settings.max_document_bytes
    if st.size > limit:
        return Skipped(f"larger than max_document_bytes ({st.size} > {limit})")
    try:
        data = st.path.read_bytes()
    except OSError as exc:
        return Skipped(f"unreadable ({exc.strerror or type(exc).__name__})")
    if len(data) > limit:  # grew since it was listed
        return Skipped(f"larger than max_document_bytes ({len(data)} > {limit})")
    return parse(rel, data, mtime_ns=st.mtime_ns, rules=rules, chunk_tokens=settings.chunk_tokens)


def unmatched_globs(base: Path, globs: Sequence[str]) -> list[str]:
    """The globs that match no file (`iris doctor` warns about each)."""
    return [g for g in globs if not expand(base, g)]


class Indexer:
    def __init__(
        self,
        *,
        store: KnowledgeStore,
        settings: KnowledgeSection,
        base: Path,
        rules: PathRules,
        clock: Clock,
        embedder: Embedder | None = None,
        on_change: Callable[[], None] = lambda: None,
        periodic: PeriodicRuns | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.base = base
        self.rules = rules
        self.clock = clock
        self.embedder = embedder
        self.on_change = on_change
        self.periodic = periodic
        self._seen: tuple[object, ...] | None = None  # the index's fingerprint, last looked at
        self._lock = asyncio.Lock()
        self._embedding = asyncio.Lock()
        self._unembedded = asyncio.Event()  # set after a background scan: embed what is new
        self._indexed = asyncio.Event()
        # Told after a scan indexed new versions, with their paths (subscriptions' trigger).
        self.changed: list[Callable[[Sequence[str]], Awaitable[None]]] = []
        self._scans = 0
        self._reported: dict[str, tuple[int, int, str]] = {}
        self.last_scan_ms: int | None = None

    async def ready(self) -> None:
        """Return once the index reflects the files at least once (scanning now if no scan
        has started yet)."""
        if not self._indexed.is_set() and not self._lock.locked():
            await self.scan()
        await self._indexed.wait()

    @property
    def scans(self) -> int:
        """Scans finished so far."""
        return self._scans

    async def run(self) -> None:
        """The background rescan, every `rescan_seconds`, until cancelled; with `periodic`
        (replicas), once per slot of `rescan_seconds` by whichever replica claims it. The
        embedding of new chunks runs beside it: a new corpus can take the local model many
        minutes, and an edit meanwhile must still reach the index at the next rescan."""
        async with asyncio.TaskGroup() as tg:
            if self.embedder is not None:
                tg.create_task(self._embed_loop(self.embedder))
            tg.create_task(self._rescan_loop())

    async def _embed_loop(self, embedder: Embedder) -> None:
        while True:
            await self._unembedded.wait()
            self._unembedded.clear()
            try:
                async with self._embedding:
                    if await self._embed(embedder):
                        self.on_change()
            except Exception:  # the next rescan asks again
                log.exception("knowledge embedding failed")

    async def _rescan_loop(self) -> None:
        if self.periodic is None:
            while True:
                await self._rescan()
                await self.clock.sleep(self.settings.rescan_seconds)
        period_ms = int(self.settings.rescan_seconds * 1000)  # at least 1 s
        while True:
            now = self.clock.now_ms()
            slot = now - now % period_ms
            try:
                mine = await self.periodic.claim(RESCAN_JOB, slot, now)
            except VaultError as exc:  # the vault may be away: the next slot tries again
                log.warning("knowledge rescan: cannot claim its slot: %s", type(exc).__name__)
            else:
                if mine:
                    await self._rescan()
                await self.follow()
            await self.clock.sleep_until(slot + period_ms)

    async def _rescan(self) -> None:
        try:
            await self.scan(embed=False)
        except Exception:  # one bad scan must not end the rescans
            log.exception("knowledge scan failed")
        else:
            self._unembedded.set()  # the embedding loop looks for chunks without a vector

    async def follow(self) -> None:
        """If the shared index changed since this replica last looked (another replica's
        rescan), its retrieval reloads what it cached. A replica that lost a slot's claim may
        look before the winner's scan is written: it sees that in the next slot."""
        try:
            seen = await self.store.fingerprint()
        except VaultError as exc:  # the next slot looks again
            log.warning("knowledge rescan: cannot read the index's state: %s", type(exc).__name__)
            return
        if seen != self._seen:  # (the first look too: caches of an earlier scan here)
            self.on_change()
        self._seen = seen

    async def scan(self, *, embed: bool = True) -> ScanReport:
        """Bring the index up to date; then, with `embed`, embed the chunks that have no
        vector yet — outside the scan lock, since that can take long on a new corpus, and at
        most one embedding pass at a time (`/context refresh` and the background rescan
        leave it to the embedding loop beside the rescans, `run`)."""
        async with self._lock:
            report = await self._index()
            self._scans += 1
            self.last_scan_ms = self.clock.now_ms()
            self._indexed.set()
            if report.indexed or report.retired:
                self.on_change()
        for listener in self.changed if report.changed else ():
            try:
                await listener(report.changed)
            except Exception:
                log.exception("knowledge change listener failed")
        if embed and self.embedder is not None and not self._embedding.locked():
            async with self._embedding:
                if await self._embed(self.embedder):
                    self.on_change()
        return report

    async def _index(self) -> ScanReport:
        report = ScanReport()
        files = await asyncio.to_thread(list_files, self.base, self.settings.documents)
        known = await self.store.file_states()
        first = self._scans == 0
        to_read = [
            (rel, st)
            for rel, st in files.items()
            if first
            or rel not in known
            or (known[rel].mtime_ns, known[rel].size) != (st.mtime_ns, st.size)
        ]
        report.unchanged = len(files) - len(to_read)
        retired = [path for path in known if path not in files]
        versions: list[DocumentVersion] = []
        touched: list[tuple[str, int, int]] = []
        for start in range(0, len(to_read), READ_BATCH):
            batch = to_read[start : start + READ_BATCH]
            results = await asyncio.to_thread(self._read_batch, batch)
            for (rel, st), result in zip(batch, results, strict=True):
                if isinstance(result, Skipped):
                    self._report_skip(rel, st, result.reason)
                    report.skipped.append(rel)
                    if rel in known:
                        retired.append(rel)
                    continue
                for warning in result.warnings:
                    self._report_skip(rel, st, warning, skipped=False)
                if _same(known.get(rel), result.version):
                    touched.append((rel, st.mtime_ns, st.size))
                    report.unchanged += 1
                else:
                    versions.append(result.version)
        now = self.clock.now_ms()
        if touched or retired:
            await self.store.apply(touched=touched, retired=retired, now_ms=now)
        for start in range(0, len(versions), WRITE_BATCH):
            await self.store.apply(versions=versions[start : start + WRITE_BATCH], now_ms=now)
        report.indexed, report.retired = len(versions), len(retired)
        report.indexed_paths, report.retired_paths = [v.path for v in versions], list(retired)
        report.changed = [v.path for v in versions] if known else []  # not the first index
        if versions or retired:
            log.info("knowledge: %d indexed, %d retired", len(versions), len(retired))
        return report

    def _read_batch(self, batch: list[tuple[str, FileStat]]) -> list[Parsed | Skipped]:
        """In a thread: read and parse files."""
        return [read_document(rel, st, self.rules, self.settings) for rel, st in batch]

    def _report_skip(self, rel: str, st: FileStat, reason: str, *, skipped: bool = True) -> None:
        key = (st.mtime_ns, st.size, reason)
        if self._reported.get(rel) == key:
            return
        self._reported[rel] = key
        log.warning("knowledge: %s %s: %s", "skipped" if skipped else "indexed", rel, reason)

    async def _embed(self, embedder: Embedder) -> int:
        missing = await self.store.missing_vectors(embedder.model)
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start : start + EMBED_BATCH]
            vectors = await embedder.embed([text for _, text in batch], query=False)
            await self.store.put_vectors(
                embedder.model, [(h, v) for (h, _), v in zip(batch, vectors, strict=True)]
            )
        return len(missing)


def _same(row: DocumentRow | None, version: DocumentVersion) -> bool:
    """Unchanged content and metadata: only the file's mtime/size need writing."""
    if row is None:
        return False
    return (row.content_hash, row.title, row.type, row.status, row.scope, row.ref_key) == (
        version.content_hash,
        version.title,
        version.type,
        version.status,
        version.scope,
        version.ref_key,
    )
