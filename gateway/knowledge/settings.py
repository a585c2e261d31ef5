"""The knowledge keys of the `[context]` section, owned by the knowledge feature.

They live in `[context]` beside the pipeline's own keys (the issue's names: `documents`,
`knowledge_tokens`, …): `gateway/app/config.py`'s `ContextSection` derives from this class.
`[context.types]` maps a glob to a document type; `[context.scopes]` maps a glob to the chats
(`chat:<channel>:<chat id>`) and users (`user:<channel>:<user id>`) that may see the documents
it matches. Globs are relative to the config file's folder; `**` spans folders.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from gateway.features.settings import Section

DocType = Literal["adr", "rfc", "runbook", "decision", "note"]
_SCOPE_ENTRY = re.compile(r"^(chat|user):[a-z][a-z0-9_-]*:\S+$")
MIB = 1024 * 1024


class KnowledgeSection(Section):
    documents: tuple[str, ...] = ()
    rescan_seconds: float = Field(30.0, ge=1)
    knowledge_tokens: int = Field(4000, ge=0)
    refresh_cooldown_seconds: float = Field(30.0, ge=0)
    max_document_bytes: int = Field(MIB, ge=1)
    chunk_tokens: int = Field(400, ge=50, le=8000)
    # "auto": semantic + lexical when the `semantic` extra is installed, lexical otherwise.
    retrieval: Literal["auto", "lexical"] = "auto"
    # Threads per call of the local embedding model: "auto" uses two only while a core is idle.
    embed_threads: Literal["auto", 1, 2] = "auto"
    types: dict[str, DocType] = Field(default_factory=dict)
    scopes: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @field_validator("documents")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for glob in value:
            if not glob.strip():
                raise ValueError("a glob may not be empty (e.g. 'notes/**/*.md')")
        return value

    @field_validator("scopes")
    @classmethod
    def _scope_entries(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for glob, entries in value.items():
            if not entries:
                raise ValueError(f"'{glob}' lists nobody: name chats or users, or remove it")
            for entry in entries:
                if not _SCOPE_ENTRY.match(entry):
                    raise ValueError(
                        f"'{glob}': entries look like 'chat:slack:C0123' or 'user:telegram:42'"
                    )
        return value
