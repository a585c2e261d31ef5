"""The knowledge index: documents, their chunks, the FTS5 index, relevance edges and cached
embeddings (schema in `vault/schema_knowledge.py`).

The indexer hands whole document versions to `apply`, which replaces a document's chunks and
edges in one write, so a reader sees either the old or the new version, never a mix. Every
query that can reach a chat takes the set of scopes visible there (`visible`, a required
argument): a document whose scope is not in it is never returned. A retired document keeps its
row (the injection audit names it) but loses its chunks and edges, so no search finds it again.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from vault.db import Vault
from vault.pg.dialect import or_query

# Every column of a document row, in `DocumentRow` order.
_DOC = """d.id, d.path, d.title, d.type, d.status, d.ref_key, d.scope, d.content_hash, d.size,
    d.mtime_ns, d.tokens, d.indexed_ms, d.retired_ms"""
# A document is visible when it has no scope or its scope is one of the JSON list given.
_VISIBLE = "(d.scope IS NULL OR d.scope IN (SELECT value FROM json_each(?)))"
# The ranked search per backend, higher scores better: FTS5's bm25 (heading weighted 2:1) on
# SQLite; on PostgreSQL ts_rank over the generated `fts` column (heading weighted 'A').
_SEARCH = {
    "sqlite": f"""SELECT c.id AS chunk, c.document AS document, -f.score AS score
        FROM (SELECT rowid, bm25(knowledge_fts, 2.0, 1.0) AS score FROM knowledge_fts
              WHERE knowledge_fts MATCH ? ORDER BY score LIMIT ?) f
        JOIN knowledge_chunks c ON c.id = f.rowid
        JOIN knowledge_documents d ON d.id = c.document
        WHERE d.retired_ms IS NULL AND {_VISIBLE}
        ORDER BY f.score LIMIT ?""",
    "postgresql": f"""SELECT c.id AS chunk, c.document AS document, f.score AS score
        FROM (SELECT k.id, ts_rank(k.fts, q) AS score
              FROM knowledge_chunks k, to_tsquery('simple', ?) q
              WHERE k.fts @@ q ORDER BY score DESC LIMIT ?) f
        JOIN knowledge_chunks c ON c.id = f.id
        JOIN knowledge_documents d ON d.id = c.document
        WHERE d.retired_ms IS NULL AND {_VISIBLE}
        ORDER BY f.score DESC, c.id LIMIT ?""",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class NewChunk:
    heading: str
    text: str
    tokens: int
    hash: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentVersion:
    """One parsed version of a file, as the indexer writes it."""

    path: str
    title: str
    type: str
    status: str
    ref_key: str | None
    scope: str | None
    content_hash: str
    size: int
    mtime_ns: int
    tokens: int
    chunks: tuple[NewChunk, ...]
    edges: tuple[tuple[str, str, float], ...]  # (target, kind, weight)


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentRow:
    id: int
    path: str
    title: str
    type: str
    status: str
    ref_key: str | None
    scope: str | None
    content_hash: str
    size: int
    mtime_ns: int
    tokens: int
    indexed_ms: int
    retired_ms: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRow:
    id: int
    ord: int
    heading: str
    text: str
    tokens: int
    hash: str


@dataclass(frozen=True, slots=True)
class Edge:
    source: int
    target: int
    kind: str
    weight: float


def _scopes(visible: Collection[str]) -> str:
    return json.dumps(sorted(visible))


def _doc(row: sqlite3.Row) -> DocumentRow:
    return DocumentRow(**dict(row))


def _write_version(raw: sqlite3.Connection, v: DocumentVersion, now_ms: int) -> None:
    found = raw.execute("SELECT id FROM knowledge_documents WHERE path = ?", (v.path,)).fetchone()
    values = (v.title, v.type, v.status, v.ref_key, v.scope, v.content_hash, v.size, v.mtime_ns)
    if found is None:
        doc = raw.execute(
            """INSERT INTO knowledge_documents (title, type, status, ref_key, scope, content_hash,
                   size, mtime_ns, tokens, indexed_ms, path) VALUES (?,?,?,?,?,?,?,?,?,?,?)
               RETURNING id""",
            (*values, v.tokens, now_ms, v.path),
        ).fetchone()[0]
    else:
        doc = found[0]
        raw.execute("DELETE FROM knowledge_chunks WHERE document = ?", (doc,))
        raw.execute("DELETE FROM relevance_edges WHERE source = ?", (doc,))
        raw.execute(
            """UPDATE knowledge_documents SET title = ?, type = ?, status = ?, ref_key = ?,
                   scope = ?, content_hash = ?, size = ?, mtime_ns = ?, tokens = ?,
                   indexed_ms = ?, retired_ms = NULL WHERE id = ?""",
            (*values, v.tokens, now_ms, doc),
        )
    raw.executemany(
        """INSERT INTO knowledge_chunks (document, ord, heading, text, tokens, hash)
           VALUES (?, ?, ?, ?, ?, ?)""",
        [(doc, i, c.heading, c.text, c.tokens, c.hash) for i, c in enumerate(v.chunks)],
    )
    raw.executemany(
        "INSERT OR IGNORE INTO relevance_edges (source, target, kind, weight) VALUES (?,?,?,?)",
        [(doc, target, kind, weight) for target, kind, weight in v.edges],
    )


class KnowledgeStore:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    # --- what the indexer reads and writes -------------------------------------------------

    async def file_states(self) -> dict[str, DocumentRow]:
        """Every document not retired, by path."""
        rows = await self.vault.fetchall(
            f"SELECT {_DOC} FROM knowledge_documents d WHERE d.retired_ms IS NULL"
        )
        return {r["path"]: _doc(r) for r in rows}

    async def fingerprint(self) -> tuple[object, ...]:
        """What changes whenever a scan (of any replica sharing the vault) changes the index or
        its vectors: live documents, latest index and retirement times, cached vectors."""
        row = await self.vault.fetchone(
            """SELECT (SELECT count(*) FROM knowledge_documents WHERE retired_ms IS NULL),
                      (SELECT max(indexed_ms) FROM knowledge_documents),
                      (SELECT max(retired_ms) FROM knowledge_documents),
                      (SELECT count(*) FROM knowledge_vectors)"""
        )
        return () if row is None else tuple(row)

    async def apply(
        self,
        *,
        versions: Sequence[DocumentVersion] = (),
        touched: Sequence[tuple[str, int, int]] = (),
        retired: Sequence[str] = (),
        now_ms: int,
    ) -> None:
        """Write new versions, new (mtime, size) of unchanged files, and retirements, at once."""

        def body(raw: sqlite3.Connection) -> None:
            for version in versions:
                _write_version(raw, version, now_ms)
            raw.executemany(
                "UPDATE knowledge_documents SET mtime_ns = ?, size = ? WHERE path = ?",
                [(mtime, size, path) for path, mtime, size in touched],
            )
            for path in retired:
                doc = raw.execute(
                    "SELECT id FROM knowledge_documents WHERE path = ?", (path,)
                ).fetchone()
                if doc is None:
                    continue
                raw.execute("DELETE FROM knowledge_chunks WHERE document = ?", (doc[0],))
                raw.execute("DELETE FROM relevance_edges WHERE source = ?", (doc[0],))
                raw.execute(
                    "UPDATE knowledge_documents SET retired_ms = ? WHERE id = ?", (now_ms, doc[0])
                )

        await self.vault.run(body)

    # --- what retrieval and the commands read ----------------------------------------------

    async def search(self, match: str, visible: Collection[str], limit: int) -> list[sqlite3.Row]:
        """(chunk, document, score) of the best chunks for an FTS5 query; higher is better.
        The index ranks first (the costly part, in C), then the few best are filtered by scope."""
        if not match:
            return []
        if self.vault.dialect == "postgresql":
            match = or_query(match)
        return await self.vault.fetchall(
            _SEARCH[self.vault.dialect], (match, limit * 4, _scopes(visible), limit)
        )

    async def term_frequencies(self, terms: Collection[str]) -> tuple[int, dict[str, int]]:
        """The number of chunks, and in how many of them each term occurs."""

        def body(raw: sqlite3.Connection) -> tuple[int, dict[str, int]]:
            total = raw.execute("SELECT count(*) FROM knowledge_chunks").fetchone()[0]
            rows = raw.execute(
                """SELECT term, doc FROM knowledge_vocab
                   WHERE term IN (SELECT value FROM json_each(?))""",
                (json.dumps(sorted(terms)),),
            ).fetchall()
            return int(total), {r[0]: int(r[1]) for r in rows}

        return await self.vault.read(body)

    async def documents(self, ids: Collection[int], visible: Collection[str]) -> list[DocumentRow]:
        """The visible, live documents among `ids`."""
        rows = await self.vault.fetchall(
            f"""SELECT {_DOC} FROM knowledge_documents d
                WHERE d.id IN (SELECT value FROM json_each(?)) AND d.retired_ms IS NULL
                AND {_VISIBLE}""",
            (json.dumps(sorted(ids)), _scopes(visible)),
        )
        return [_doc(r) for r in rows]

    async def any_documents(self, ids: Collection[int]) -> dict[int, DocumentRow]:
        """Rows by id, retired ones included (for what a session was already given)."""
        rows = await self.vault.fetchall(
            f"""SELECT {_DOC} FROM knowledge_documents d
                WHERE d.id IN (SELECT value FROM json_each(?))""",
            (json.dumps(sorted(ids)),),
        )
        return {r["id"]: _doc(r) for r in rows}

    async def visible(self, visible: Collection[str]) -> list[DocumentRow]:
        rows = await self.vault.fetchall(
            f"""SELECT {_DOC} FROM knowledge_documents d
                WHERE d.retired_ms IS NULL AND {_VISIBLE} ORDER BY d.path""",
            (_scopes(visible),),
        )
        return [_doc(r) for r in rows]

    async def version(self, document: int) -> tuple[str, list[ChunkRow]] | None:
        """The current content hash and chunks of a live document, read in one statement (one
        consistent snapshot, even while the indexer replaces the version)."""
        rows = await self.vault.fetchall(
            """SELECT d.content_hash, c.id, c.ord, c.heading, c.text, c.tokens, c.hash
               FROM knowledge_documents d JOIN knowledge_chunks c ON c.document = d.id
               WHERE d.id = ? AND d.retired_ms IS NULL ORDER BY c.ord""",
            (document,),
        )
        if not rows:
            return None
        chunks = [
            ChunkRow(
                id=r["id"], ord=r["ord"], heading=r["heading"], text=r["text"],
                tokens=r["tokens"], hash=r["hash"],
            )
            for r in rows
        ]  # fmt: skip
        return rows[0]["content_hash"], chunks

    async def edges_from(self, sources: Collection[int], visible: Collection[str]) -> list[Edge]:
        """Edges from `sources` to visible, live documents, by path or by reference key."""
        rows = await self.vault.fetchall(
            f"""SELECT e.source, d.id AS target, e.kind, e.weight FROM relevance_edges e
                JOIN knowledge_documents d ON (d.path = e.target OR d.ref_key = e.target)
                WHERE e.source IN (SELECT value FROM json_each(?)) AND d.id != e.source
                AND d.retired_ms IS NULL AND {_VISIBLE}
                ORDER BY e.weight DESC, d.path""",
            (json.dumps(sorted(sources)), _scopes(visible)),
        )
        return [Edge(r["source"], r["target"], r["kind"], r["weight"]) for r in rows]

    # --- embeddings ------------------------------------------------------------------------

    async def missing_vectors(self, model: str) -> list[tuple[str, str]]:
        """(hash, text) of live chunks with no cached embedding for `model`."""
        rows = await self.vault.fetchall(
            """SELECT c.hash, min(c.text) AS text FROM knowledge_chunks c
               WHERE NOT EXISTS (SELECT 1 FROM knowledge_vectors v
                                 WHERE v.model = ? AND v.hash = c.hash)
               GROUP BY c.hash""",
            (model,),
        )
        return [(r["hash"], r["text"]) for r in rows]

    async def put_vectors(self, model: str, vectors: Sequence[tuple[str, bytes]]) -> None:
        await self.vault.run(
            lambda raw: raw.executemany(
                """INSERT INTO knowledge_vectors (model, hash, vector) VALUES (?, ?, ?)
                   ON CONFLICT (model, hash) DO UPDATE SET vector = excluded.vector""",
                [(model, h, v) for h, v in vectors],
            )
        )

    async def vectors(self, model: str) -> list[sqlite3.Row]:
        """(chunk, document, scope, vector) of every live chunk embedded with `model`."""
        return await self.vault.fetchall(
            """SELECT c.id AS chunk, c.document AS document, d.scope AS scope, v.vector AS vector
               FROM knowledge_chunks c JOIN knowledge_documents d ON d.id = c.document
               JOIN knowledge_vectors v ON v.model = ? AND v.hash = c.hash
               WHERE d.retired_ms IS NULL ORDER BY c.id""",
            (model,),
        )
