"""Lexical retrieval on a large index: terms too common to tell chunks apart are left out of the
query, and the term counts that decide it follow the index when documents change."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.clock import ManualClock
from gateway.knowledge import retrieval
from gateway.knowledge.indexer import Indexer
from gateway.knowledge.retrieval import Mode, Retriever
from gateway.knowledge.rules import PathRules
from gateway.knowledge.settings import KnowledgeSection
from tests.gateway.knowledge.support import write
from vault.db import Vault
from vault.knowledge import KnowledgeStore
from vault.migrations import migrate

FILLER = "alpha beta gamma"  # in every document


async def _titles(retriever: Retriever, store: KnowledgeStore, text: str) -> list[str]:
    hits = await retriever.search(text, set(), k=5, mode=Mode.LEXICAL)
    docs = await store.documents([h.document for h in hits], set())
    titles = {d.id: d.title for d in docs}
    return [titles[h.document] for h in hits]


async def test_common_terms_are_left_out_and_counts_follow_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retrieval, "CUTOFF_FROM_CHUNKS", 1)  # treat this index as a large one
    for n in range(6):
        extra = "zebra" if n == 0 else "plain"
        write(tmp_path, f"d{n}.md", f"# Doc {n}\n\n{FILLER} {extra} words{n}\n")
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        store = KnowledgeStore(vault)
        retriever = Retriever(store)
        indexer = Indexer(
            store=store,
            settings=KnowledgeSection(documents=("docs/*.md",)),
            base=tmp_path,
            rules=PathRules({}, {}),
            clock=ManualClock(1_700_000_000_000),
            on_change=retriever.invalidate,
        )
        await indexer.scan()

        # Every chunk has "alpha" and "beta": no lexical evidence at all, so nothing.
        assert await _titles(retriever, store, "alpha beta") == []
        # A rare word still finds its document; the common ones do not drag in the rest.
        assert await _titles(retriever, store, "alpha zebra beta") == ["Doc 0"]

        # Now "zebra" is everywhere: the counts read before the change must not be reused.
        for n in range(1, 6):
            write(tmp_path, f"d{n}.md", f"# Doc {n}\n\n{FILLER} zebra words{n}\n")
        await indexer.scan()
        assert await _titles(retriever, store, "alpha zebra beta") == []
        assert await _titles(retriever, store, "zebra words3") == ["Doc 3"]
