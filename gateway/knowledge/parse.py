"""One file's bytes -> one document version, or the reason it cannot be indexed. Pure.

Type and status come from the front matter, else the type from `[context.types]`, else `note`.
A broken front matter block is reported (the warning names the file) and the document is
indexed as a plain note: its text still reaches people, its metadata is not guessed. Binary
files (a NUL byte, or bytes that are not UTF-8) are skipped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import get_args

from gateway.agent.context import estimate_tokens
from gateway.knowledge.chunking import chunk
from gateway.knowledge.markdown import edges, front_matter, ref_key, title_of
from gateway.knowledge.rules import PathRules
from gateway.knowledge.settings import DocType
from vault.knowledge import DocumentVersion, NewChunk

TYPES = frozenset(get_args(DocType))
STATUSES = frozenset(("draft", "accepted", "in-progress", "implemented", "superseded"))


@dataclass(frozen=True, slots=True)
class Skipped:
    reason: str


@dataclass(frozen=True, slots=True)
class Parsed:
    version: DocumentVersion
    warnings: tuple[str, ...] = ()


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse(
    path: str, data: bytes, *, mtime_ns: int, rules: PathRules, chunk_tokens: int
) -> Parsed | Skipped:
    if b"\x00" in data[:8192]:
        return Skipped("binary file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Skipped("not UTF-8 text")
    text = text.replace("\r\n", "\n")
    fm = front_matter(text)
    warnings: list[str] = []
    doc_type, status = "note", ""
    if fm.problem is not None:
        warnings.append(f"{fm.problem}; indexed as a note")
    else:
        declared = fm.fields.get("type", "").lower()
        if declared and declared not in TYPES:
            warnings.append(f"unknown type '{declared[:40]}'")
        doc_type = declared if declared in TYPES else (rules.type_for(path) or "note")
        status = fm.fields.get("status", "").lower()
        if status and status not in STATUSES:
            warnings.append(f"unknown status '{status[:40]}'")
            status = ""
    title = title_of(fm.body, path)
    chunks = tuple(
        NewChunk(heading=c.heading, text=c.text, tokens=c.tokens, hash=c.hash)
        for c in chunk(title, fm.body, chunk_tokens)
    )
    version = DocumentVersion(
        path=path,
        title=title,
        type=doc_type,
        status=status,
        ref_key=ref_key(title, path, doc_type),
        scope=rules.scope_for(path),
        content_hash=content_hash(data),
        size=len(data),
        mtime_ns=mtime_ns,
        tokens=sum(c.tokens for c in chunks) or estimate_tokens(""),
        chunks=chunks,
        edges=tuple(edges(fm.body, path)),
    )
    return Parsed(version, tuple(warnings))
