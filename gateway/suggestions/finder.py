"""The finder: items in scope of a chat that the conversation would want, ranked, with a reason.

Sources: team documents (the knowledge feature's retrieval, lexical and — with an `Embedder` —
semantic, over the scopes this chat may see; the semantic similarity only lifts a lexical
match, for one embedding of the message per turn), the user's memories (only in their private
chat: in a group everyone reads the reply), the user's pending follow-ups in this chat,
documents that changed since this chat was last given them (the `context_injections` audit),
and warnings: a superseded document the conversation leans on. Every read is scoped by the
chat it is for; no caller can widen it. The relevance is absolute (`relevance.py`), so a chat
about something else gets nothing rather than the least bad match. Other features
(subscriptions, tools) call `find`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.core.embedding import Embedder
from gateway.core.scope import Scope
from gateway.knowledge.retrieval import Retriever
from gateway.knowledge.rules import PathRules
from gateway.suggestions.relevance import (
    SEMANTIC_AGREEMENT,
    SEMANTIC_LIFT,
    Match,
    lexical,
    lifted,
    moves_on,
    spelled,
    stem,
    weights,
    words,
)
from vault.knowledge import DocumentRow, KnowledgeStore
from vault.memories import Memories
from vault.suggestions import SuggestionStore

DOC_CANDIDATES = 8
MEMORY_CANDIDATES = 8
SUMMARY_CHARS = 140
CONTENT_CHARS = 4000
DAY_MS = 86_400_000
SEARCH_WORDS = 10
MIN_SEARCH_WORDS = 2
LARGE_INDEX = 2000
COMMON_SHARE = 0.02
# A document this chat used before and that changed since is worth more than a new one.
CHANGED_BONUS = 0.08


class ItemType(StrEnum):
    DECISION = "decision"
    CHANGE = "change"
    DOC = "doc"
    MEMORY = "memory"
    FOLLOWUP = "followup"
    WARNING = "warning"


@dataclass(frozen=True)
class Candidate:
    key: str  # stable identity: "doc:<document id>", "memory:<id>", "followup:<id>"
    type: ItemType
    title: str
    summary: str  # one line
    relevance: float  # 0..1
    reason: str
    # The item's text as the model would be given it after "Use" (not part of identity).
    content: str = field(default="", compare=False, repr=False)
    # A document's content hash: whether the request carried this very version.
    version: str = field(default="", compare=False, repr=False)


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The text on one line, Markdown headings left out, cut at a word under `limit`."""
    kept = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    line = " ".join(" ".join(kept).split()) or " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


def search_words(raw: list[str], total: int, frequency: dict[str, int]) -> list[str]:
    """On a large index, the words candidates are searched with (all words still score
    them): the `SEARCH_WORDS` rarest, and of those only the ones in at most `COMMON_SHARE` of
    the chunks (the `MIN_SEARCH_WORDS` rarest always stay) — a common word matches much of the
    index, which is slow to rank and rarely what a suggestion is about."""
    rarest = sorted(raw, key=lambda t: frequency.get(t, 0))[:SEARCH_WORDS]
    return [
        t
        for n, t in enumerate(rarest)
        if n < MIN_SEARCH_WORDS or frequency.get(t, 0) <= COMMON_SHARE * total
    ]


def age(ms: int) -> str:
    days = ms // DAY_MS
    if days >= 2:
        return f"{days} days ago"
    if days == 1:
        return "yesterday"
    hours = ms // 3_600_000
    return f"{hours} h ago" if hours >= 1 else "just now"


@dataclass(frozen=True, slots=True)
class Asked:
    """What a turn asks about: the conversation's terms (each mapped to the word it was spelled
    as), the current message's own terms, and each term's weight."""

    query: dict[str, str]
    current: frozenset[str]
    weights: dict[str, float]

    def match(self, title: str, body: str) -> Match:
        """The item's lexical match; none when it is only about the earlier messages."""
        found = lexical(self.query, title, body, self.weights)
        return found if found.speaks_to(self.current) else Match(0.0, ())


def _topic(match: Match) -> str:
    return ", ".join(match.shared[:3])


class Finder:
    def __init__(
        self,
        *,
        knowledge: KnowledgeStore,
        retriever: Retriever,
        rules: PathRules,
        memories: Memories,
        store: SuggestionStore,
        embedder: Embedder | None = None,
    ) -> None:
        self.knowledge = knowledge
        self.retriever = retriever
        self.rules = rules
        self.memories = memories
        self.store = store
        self.embedder = embedder

    async def _frequencies(self, wanted: set[str]) -> tuple[int, dict[str, int]]:
        """How many chunks hold each word (the retriever keeps them until the index changes:
        counting a common word walks its whole posting list)."""
        return await self.retriever.term_frequencies(sorted(wanted))

    async def find(
        self,
        scope: Scope,
        text: str,
        *,
        recent: Sequence[str] = (),
        exclude: Collection[str] = (),
        limit: int = 5,
        min_relevance: float = 0.0,
    ) -> list[Candidate]:
        """Items in scope of `scope`'s chat relevant to `text` (and the `recent` messages
        before it), best first: at most `limit`, each at least `min_relevance`, none in
        `exclude` (keys)."""
        if limit <= 0:
            return []
        if moves_on(text):
            recent = ()  # a new subject: what came before is not what this is about
        query = spelled(text)
        current = frozenset(query)
        for earlier in recent[-2:]:
            query = {**spelled(earlier), **query}
        if not query:
            return []
        raw = list(dict.fromkeys(words("\n".join([*recent[-2:], text]))))
        total, frequency = await self._frequencies({*raw, *(stem(w) for w in raw)})
        w = weights(raw, total, frequency)
        conversation = [*recent[-2:], text]
        full = "\n".join(conversation)
        if total >= LARGE_INDEX:
            full = " ".join(search_words(raw, total, frequency))
        asked = Asked(query, current, w)
        found = await asyncio.gather(
            self._documents(scope, full, conversation, asked, min_relevance),
            self._memories(scope, full, asked),
            self._followups(scope, full, asked),
        )
        ranked = sorted(
            (c for group in found for c in group if c.key not in exclude),
            key=lambda c: (-c.relevance, c.key),
        )
        return [c for c in ranked if c.relevance >= min_relevance and c.relevance > 0][:limit]

    # --- documents: doc, decision, change, warning -----------------------------------

    async def _documents(
        self,
        scope: Scope,
        text: str,
        conversation: Sequence[str],
        asked: Asked,
        min_relevance: float,
    ) -> list[Candidate]:
        visible = self.rules.visible(scope)
        hits = {
            h.document: h for h in (await self.retriever.lexical(text, visible))[:DOC_CANDIDATES]
        }
        if not hits:
            return []
        docs = {d.id: d for d in await self.knowledge.documents(hits, visible)}
        best = [hits[d].chunks[0] for d in docs if hits[d].chunks]  # each one's best chunk
        chunks, given = await asyncio.gather(
            self.store.chunks(best), self.store.last_given(scope.chat_pk, docs)
        )
        scored = []
        for doc in docs.values():
            picked = [chunks[c] for c in hits[doc.id].chunks[:1] if c in chunks]
            body = "\n".join(f"{c.heading}\n{c.text}" for c in picked)
            match = asked.match(doc.title, body)
            if match.relevance > 0:
                scored.append((doc, picked, body, match))
        # The semantic similarity can only lift a lexical match by SEMANTIC_LIFT, and a match
        # whose document is not near the conversation at all (below SEMANTIC_AGREEMENT) is
        # dropped: its shared words are used in another sense ("the red star cluster in Orion"
        # and the runbook for a red search cluster). The message is embedded only when a
        # candidate could reach `min_relevance`. Each message is embedded alone and the vectors
        # blended (`Retriever.query_vector`): the earlier ones are in the embedder's cache from
        # their own turns.
        cosines: dict[int, float] = {}
        near: dict[int, float] = {}
        if self.embedder and any(m.relevance + SEMANTIC_LIFT >= min_relevance for *_, m in scored):
            vector = await self.retriever.query_vector(conversation[-1], conversation[:-1])
            found = await self.retriever.semantic_near(vector, visible)
            cosines = {h.document: h.score for h in found}
            near = await self.retriever.closeness(vector, [d.id for d, *_ in scored])
        out = []
        for doc, picked, body, match in scored:
            if near.get(doc.id, 1.0) < SEMANTIC_AGREEMENT:
                continue
            relevance = lifted(match.relevance, cosines.get(doc.id))
            first = picked[0].text if picked else doc.title
            out.append(self._document(scope, doc, match, relevance, first, body, given))
        return out

    @staticmethod
    def _document(
        scope: Scope,
        doc: DocumentRow,
        match: Match,
        relevance: float,
        first: str,
        body: str,
        given: dict[int, str],
    ) -> Candidate:
        topic = _topic(match)
        if doc.status == "superseded":
            kind = ItemType.WARNING
            reason = (
                f"you are discussing {topic}; '{doc.title}' is superseded — check before "
                "relying on it"
            )
        elif doc.id in given and given[doc.id] != doc.content_hash:
            kind = ItemType.CHANGE
            relevance = min(relevance + CHANGED_BONUS, 1.0)
            when = age(max(scope.now_ms - doc.indexed_ms, 0))
            reason = (
                f"you are discussing {topic}; '{doc.title}' changed {when}, since this chat "
                "last used it"
            )
        elif doc.type in ("adr", "decision"):
            kind = ItemType.DECISION
            reason = f"you are discussing {topic}; the decision '{doc.title}' covers it"
        else:
            kind = ItemType.DOC
            reason = f"you are discussing {topic}; '{doc.title}' covers it"
        return Candidate(
            key=f"doc:{doc.id}",
            type=kind,
            title=doc.title,
            summary=one_line(first),
            relevance=relevance,
            reason=reason,
            content=f"{doc.title} ({doc.path})\n{body}"[:CONTENT_CHARS],
            version=doc.content_hash,
        )

    # --- the user's own items ---------------------------------------------------------

    async def _memories(self, scope: Scope, text: str, asked: Asked) -> list[Candidate]:
        if scope.in_group:  # a user's memories never go where a group reads them
            return []
        found = await self.memories.search(scope.user_pk, text, MEMORY_CANDIDATES)
        if not found:
            return []
        out = []
        for memory in found:
            if memory.created_ms >= scope.now_ms:  # saved during this turn: nothing to remind of
                continue
            match = asked.match(memory.text, "")
            relevance = match.relevance
            if relevance <= 0:
                continue
            out.append(
                Candidate(
                    key=f"memory:{memory.id}",
                    type=ItemType.MEMORY,
                    title="Something you told me",
                    summary=one_line(memory.text),
                    relevance=relevance,
                    reason=f"you are discussing {_topic(match)}; you told me this "
                    f"{age(max(scope.now_ms - memory.created_ms, 0))}",
                    content=memory.text[:CONTENT_CHARS],
                )
            )
        return out

    async def _followups(self, scope: Scope, text: str, asked: Asked) -> list[Candidate]:
        # Not one registered during this turn: the user just asked for it.
        found = await self.store.followups(scope.user_pk, scope.chat_pk, before_ms=scope.now_ms)
        out = []
        for item in found:
            match = asked.match(item.what, item.why)
            relevance = match.relevance
            if relevance <= 0:
                continue
            out.append(
                Candidate(
                    key=f"followup:{item.id}",
                    type=ItemType.FOLLOWUP,
                    title="A pending follow-up",
                    summary=one_line(item.what),
                    relevance=relevance,
                    reason=f"you are discussing {_topic(match)}; a follow-up about it is still "
                    "pending",
                    content=f"Pending follow-up: {item.what}"
                    + (f" ({item.why})" if item.why else ""),
                )
            )
        return out
