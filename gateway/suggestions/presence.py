"""Whether the finder could find anything for a chat at all, answered before asking it.

Most turns of most deployments have nothing to suggest: no team documents indexed, a user
without memories, no pending follow-ups. Asking the finder anyway costs every reply about
eight vault reads and the ranking around them. The finder's sources are the knowledge index
(documents, decisions, changes, warnings), the user's memories (private chats only) and their
pending follow-ups in the chat; if all three are empty it can only return nothing, so the
block under a reply is skipped after one indexed probe.

The answers come from state that is already cached where it lives and kept current by its
owner: the index's chunk count (the retriever's, reset when the indexer changes the index)
and whether the user has memories (`Memories.has_any`, updated by `remember` / `forget`).
Follow-ups change with the proactive engine's every step, so they are probed, not cached.
`offerable` (documents or memories, no probe) decides whether the suggestion tools are
offered to the model: follow-ups are already in every request (the proactive provider).
"""

from __future__ import annotations

from gateway.core.scope import Scope
from gateway.knowledge.retrieval import Retriever
from vault.memories import Memories
from vault.suggestions import SuggestionStore


class Presence:
    def __init__(self, *, retriever: Retriever, memories: Memories, store: SuggestionStore) -> None:
        self.retriever = retriever
        self.memories = memories
        self.store = store

    async def documents(self) -> bool:
        """Whether the knowledge index holds anything (in any scope)."""
        total, _ = await self.retriever.term_frequencies(())
        return total > 0

    async def offerable(self, scope: Scope) -> bool:
        """Documents are indexed, or the user has memories the finder may show here."""
        if await self.documents():
            return True
        return not scope.in_group and await self.memories.has_any(scope.user_pk)

    async def anything(self, scope: Scope) -> bool:
        """Whether `Finder.find` could return anything for this scope."""
        if await self.offerable(scope):
            return True
        return await self.store.has_followups(scope.user_pk, scope.chat_pk, before_ms=scope.now_ms)
