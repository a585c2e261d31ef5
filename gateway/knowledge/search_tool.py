"""`documents_search`: the model looks something up in the team documents on its own.

A turn already carries the documents retrieval picked for its message; this tool is for when
the model needs another one — above all in the proactive gate, which has no user message to
retrieve for and decides whether a follow-up is still worth sending (is the release out? did
the runbook change?). It searches with the same retriever and shows the same `<document>`
blocks as the context provider, limited to what the current chat may see: `[context.scopes]`
hold for it exactly as for injection (a user-scoped document never shows in a group). It is
marked `proactive`, so the gate offers it; it reads and records nothing. In chat turns it is
offered once the index holds something (the retriever's cached chunk count).
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from gateway.agent.tools import Tool
from gateway.core.scope import Scope
from gateway.knowledge.indexer import Indexer
from gateway.knowledge.provider import pick, render
from gateway.knowledge.retrieval import Retriever
from gateway.knowledge.rules import PathRules
from vault.knowledge import KnowledgeStore

DESCRIPTION = (
    "Search the team's documents (runbooks, decisions, notes) visible in this chat; returns "
    "the best matches with their title, path and the relevant sections."
)
MAX_DOCUMENTS = 3
TOKENS_PER_DOCUMENT = 1_000
NOTHING = "no matching team documents"


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=500, description="what to look for")


def documents_search_tool(
    *, store: KnowledgeStore, retriever: Retriever, indexer: Indexer, rules: PathRules
) -> Tool:
    async def search(scope: Scope, args: SearchArgs) -> str:
        await indexer.ready()
        visible = rules.visible(scope)
        hits = await retriever.search(args.query, visible, MAX_DOCUMENTS)
        if not hits:
            return NOTHING
        live = {d.id: d for d in await store.documents({h.document for h in hits}, visible)}
        found: list[str] = []
        for hit in hits:
            doc = live.get(hit.document)
            current = await store.version(hit.document) if doc is not None else None
            if doc is None or current is None:  # retired while we looked
                continue
            version, chunks = current
            picked = pick(chunks, hit.chunks, TOKENS_PER_DOCUMENT)
            found.append(render(replace(doc, content_hash=version), chunks, picked))
        return "\n\n".join(found) or NOTHING

    async def indexed(scope: Scope) -> bool:  # offered once there is something to search
        total, _ = await retriever.term_frequencies(())
        return total > 0

    return Tool("documents_search", DESCRIPTION, SearchArgs, search, proactive=True,
                offered=indexed)  # fmt: skip
