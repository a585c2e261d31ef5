"""Schema of team knowledge (`vault/knowledge.py`, `vault/injections.py`,
`vault/context_settings.py`).

- `knowledge_documents`: one row per file ever indexed, with its content hash; a deleted file's
  row stays (the audit names it) with `retired_ms` set and its chunks gone, so it can never be
  found or injected again.
- `knowledge_chunks` and `knowledge_fts`: the text split at headings, and its FTS5 index, kept
  in sync by triggers (chunks are only ever inserted and deleted, never updated);
  `knowledge_vocab` reads the index's document frequency of each term.
- `knowledge_vectors`: embeddings cached per (model, chunk hash), so an unchanged chunk is never
  embedded twice, whichever document or version it belongs to.
- `relevance_edges`: `References:` lines (`explicit`) and Markdown links (`link`) between
  documents. The target is a path or a reference key such as `adr:5`, resolved when read, so an
  edge to a document indexed later still works.
- `context_injections`: the audit of every injection into a session — the source of truth for
  staleness; `knowledge_snapshots` holds the exact text injected, by its hash, so a session keeps
  seeing the version it was given until its refresh policy lets it change.
- `context_provider_settings`: what admins changed with `/context events` (on/off, priority).
"""

from __future__ import annotations

from vault.schema import Migration

KNOWLEDGE = Migration(
    "knowledge",
    (
        """CREATE TABLE knowledge_documents (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL,
            type TEXT NOT NULL CHECK (type IN ('adr', 'rfc', 'runbook', 'decision', 'note')),
            status TEXT NOT NULL DEFAULT '',
            ref_key TEXT,
            scope TEXT,
            content_hash TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            indexed_ms INTEGER NOT NULL,
            retired_ms INTEGER
        ) STRICT""",
        "CREATE INDEX knowledge_documents_ref ON knowledge_documents(ref_key)",
        """CREATE TABLE knowledge_chunks (
            id INTEGER PRIMARY KEY,
            document INTEGER NOT NULL REFERENCES knowledge_documents(id),
            ord INTEGER NOT NULL,
            heading TEXT NOT NULL,
            text TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            hash TEXT NOT NULL,
            UNIQUE (document, ord)
        ) STRICT""",
        """CREATE VIRTUAL TABLE knowledge_fts USING fts5(
            heading, text, content='knowledge_chunks', content_rowid='id',
            tokenize='unicode61 remove_diacritics 2'
        )""",
        # Document frequencies of the indexed terms: retrieval leaves out the very common ones.
        "CREATE VIRTUAL TABLE knowledge_vocab USING fts5vocab(knowledge_fts, 'row')",
        """CREATE TRIGGER knowledge_chunks_ai AFTER INSERT ON knowledge_chunks BEGIN
            INSERT INTO knowledge_fts(rowid, heading, text)
            VALUES (new.id, new.heading, new.text);
        END""",
        """CREATE TRIGGER knowledge_chunks_ad AFTER DELETE ON knowledge_chunks BEGIN
            INSERT INTO knowledge_fts(knowledge_fts, rowid, heading, text)
            VALUES ('delete', old.id, old.heading, old.text);
        END""",
        """CREATE TABLE knowledge_vectors (
            model TEXT NOT NULL,
            hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (model, hash)
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE relevance_edges (
            id INTEGER PRIMARY KEY,
            source INTEGER NOT NULL REFERENCES knowledge_documents(id),
            target TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('explicit', 'link')),
            weight REAL NOT NULL DEFAULT 1.0,
            UNIQUE (source, target, kind)
        ) STRICT""",
        "CREATE INDEX relevance_edges_target ON relevance_edges(target)",
        """CREATE TABLE knowledge_snapshots (
            hash TEXT PRIMARY KEY,
            text TEXT NOT NULL,
            tokens INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE context_injections (
            id INTEGER PRIMARY KEY,
            session INTEGER NOT NULL REFERENCES sessions(id),
            chat INTEGER NOT NULL REFERENCES chats(id),
            document INTEGER NOT NULL REFERENCES knowledge_documents(id),
            content_hash TEXT NOT NULL,
            snapshot TEXT NOT NULL REFERENCES knowledge_snapshots(hash),
            tokens INTEGER NOT NULL,
            reason TEXT NOT NULL CHECK (
                reason IN ('relevant', 'linked', 'session_start', 'changed', 'requested')
            ),
            at_ms INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX context_injections_session ON context_injections(session, document, id)",
        "CREATE INDEX context_injections_chat ON context_injections(chat, document, id)",
        """CREATE TABLE context_provider_settings (
            name TEXT PRIMARY KEY,
            enabled INTEGER NOT NULL,
            priority INTEGER,
            actor TEXT NOT NULL,
            at_ms INTEGER NOT NULL
        ) STRICT""",
    ),
)
