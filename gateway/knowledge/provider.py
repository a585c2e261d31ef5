"""The knowledge context provider: the documents this turn's model request carries.

Candidates are the documents retrieval finds for the message and the previous user message,
the documents they link to (relevance edges), and what this session was already given (its
working set, from the injection audit). Each gets a staleness decision (`staleness.py`); new
and refreshed ones are rendered from the index's current version, the others reuse the exact
text given before. Documents whose policy keeps them unchanged for the session go into the
cacheable system prefix, sorted by path so its bytes repeat between turns; the others follow
it. The pipeline caps the provider at `[context] knowledge_tokens` (least relevant dropped
first, the trace says which). What made it into the request (`assembled`) is recorded as
injected only once the model has answered the turn (`answered`, from the feature's step); a
turn whose model call failed records nothing (`abandoned`), so a document it carried is still
new to the session and its refresh cooldown does not start. A retired document, or one outside
this chat's scope, is never given again; one retired or changed while a turn uses it is given
as it was read (the text and hash come from one consistent read of the index).
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass, replace

from gateway.agent.context import ContextItem, Phase, Position, estimate_tokens
from gateway.core.cues import changes_subject
from gateway.core.scope import Scope
from gateway.knowledge.indexer import Indexer
from gateway.knowledge.retrieval import Hit, Retriever
from gateway.knowledge.rules import PathRules, is_stable, policy_of
from gateway.knowledge.settings import KnowledgeSection
from gateway.knowledge.staleness import Action, decide
from vault.conversations import Conversations
from vault.injections import InjectionLog, NewInjection
from vault.knowledge import ChunkRow, DocumentRow, KnowledgeStore

TOP_K = 3
RECENT_USER_MESSAGES = 1


EXCERPT = re.compile(r' excerpt="([^"]*)"')  # in the <document> tag `render` writes


def short(hash_: str) -> str:
    return hash_[:8]


# A document's own text may not open or close a <document> element: whatever it says stays
# inside its own (a file that ends its block early would speak as the system prompt).
_TAG = re.compile(r"<(\s*/?\s*document)", re.IGNORECASE)


def inert(text: str) -> str:
    """`text` with any <document> or </document> tag of its own made harmless (`&lt;`)."""
    return _TAG.sub(r"&lt;\1", text)


def _attr(value: str) -> str:
    """An attribute value as the model reads it: quotes and angle brackets escaped, so a file
    name like `x" status="superseded.md` cannot forge another attribute."""
    return html.escape(value.replace("\n", " "), quote=True)


def render(doc: DocumentRow, chunks: list[ChunkRow], picked: list[int]) -> str:
    """The text the model sees for a document: all of it, or the picked chunks in order."""
    attrs = f'title="{_attr(doc.title)}" path="{_attr(doc.path)}" type="{_attr(doc.type)}"'
    if doc.status:
        attrs += f' status="{_attr(doc.status)}"'
    attrs += f' version="{short(doc.content_hash)}"'
    chosen = [c for c in chunks if c.id in picked] if picked else chunks
    if len(chosen) < len(chunks):
        attrs += f' excerpt="{len(chosen)} of {len(chunks)} sections"'
    body = (
        "\n\n[…]\n\n".join(c.text for c in chosen)
        if picked
        else "\n\n".join(c.text for c in chunks)
    )
    return f"<document {attrs}>\n{inert(body)}\n</document>"


def pick(chunks: list[ChunkRow], ranked: list[int], cap: int) -> list[int]:
    """Chunk ids within `cap` tokens: the best-ranked first, then the document's start.
    Empty when the whole document fits."""
    if sum(c.tokens for c in chunks) <= cap:
        return []
    by_id = {c.id: c for c in chunks}
    order = [i for i in ranked if i in by_id] + [c.id for c in chunks if c.id not in ranked]
    picked: list[int] = []
    total = 0
    for chunk_id in order:
        tokens = by_id[chunk_id].tokens
        if picked and total + tokens > cap:
            continue
        picked.append(chunk_id)
        total += tokens
    return picked


class KnowledgeProvider:
    name = "documents"
    phase = Phase.ENRICH
    priority = 40

    def __init__(
        self,
        *,
        store: KnowledgeStore,
        injections: InjectionLog,
        retriever: Retriever,
        indexer: Indexer,
        rules: PathRules,
        conversations: Conversations,
        settings: KnowledgeSection,
    ) -> None:
        self.store = store
        self.injections = injections
        self.retriever = retriever
        self.indexer = indexer
        self.rules = rules
        self.conversations = conversations
        self.budget_tokens = settings.knowledge_tokens
        self.cooldown_ms = int(settings.refresh_cooldown_seconds * 1000)
        self.per_document = max(settings.knowledge_tokens // 2, 1)
        # Per session, between assembly and the model's answer: the rows to record, and
        # whether the request carried out a pending `/context refresh`. Kept for the length of
        # one turn only (a chat runs one turn at a time); the vault holds everything else.
        self._building: dict[int, _Building] = {}
        self._pending: dict[int, _Building] = {}

    async def _earlier(self, scope: Scope) -> list[str]:
        """The session's recent user messages before this one, which retrieval blends in;
        none when this one says it changes the subject ("anyway, …", `changes_subject`)."""
        if changes_subject(scope.text):
            return []
        rows = await self.conversations.history(
            scope.session_pk, limit=2 * RECENT_USER_MESSAGES, before_id=scope.message_pk
        )
        return [r.text for r in rows if r.role == "user"][-RECENT_USER_MESSAGES:]

    async def refresh_allowed(self, scope: Scope) -> bool:
        last = await self.injections.last_refresh_ms(scope.session_pk)
        return self._cooled(last, scope.now_ms)

    def _cooled(self, last_refresh_ms: int | None, now_ms: int) -> bool:
        return last_refresh_ms is None or now_ms - last_refresh_ms >= self.cooldown_ms

    async def provide(self, scope: Scope) -> list[ContextItem] | None:
        if self.budget_tokens == 0:
            return None
        await self.indexer.ready()
        visible = self.rules.visible(scope)
        earlier = await self._earlier(scope)
        found = await self.retriever.search(scope.text, visible, TOP_K, earlier=earlier)
        hits = {h.document: h for h in found}
        linked: dict[int, float] = {}
        for edge in await self.store.edges_from(hits, visible) if hits else []:
            if edge.target not in hits and edge.target not in linked:
                linked[edge.target] = edge.weight * hits[edge.source].score
        state = await self.injections.session_state(scope.session_pk)
        given = state.given
        live = {d.id: d for d in await self.store.documents({*hits, *linked, *given}, visible)}
        allowed = self._cooled(state.last_refresh_ms, scope.now_ms)
        requested = state.refresh_requested
        items: list[ContextItem] = []
        pending: dict[str, NewInjection] = {}
        for doc in sorted(live.values(), key=lambda d: d.path):
            was = given.get(doc.id)
            hit = hits.get(doc.id)
            decision = decide(
                given_hash=was.injection.content_hash if was else None,
                current_hash=doc.content_hash,
                policy=policy_of(doc.type, doc.status),
                wanted="relevant" if hit else "linked" if doc.id in linked else None,
                refresh_allowed=allowed,
                requested=requested,
            )
            if decision is None:
                continue
            if decision.action in (Action.KEEP, Action.KEEP_STALE):
                assert was is not None
                text, version = was.text, was.injection.content_hash
            else:
                built = await self._build(doc, hit)
                if built is None:  # retired while we looked
                    continue
                text, version = built
                pending[f"doc:{doc.id}"] = self._row(scope, doc.id, version, text, decision.reason)
            items.append(self._item(doc, text, version, decision.reason, hit, linked.get(doc.id)))
        # A pending `/context refresh` is carried out by this request if the cooldown allows
        # it (cleared when the model answers, not before: a failed call leaves it pending).
        self._building[scope.session_pk] = _Building(pending, requested and allowed)
        # `live` is in path order: the stable part of the prompt keeps the same bytes.
        stable = [i for i in items if i.position is Position.SYSTEM_STABLE]
        dynamic = sorted(
            (i for i in items if i.position is Position.SYSTEM), key=lambda i: -i.relevance
        )
        return [*stable, *dynamic] or None

    async def _build(self, doc: DocumentRow, hit: Hit | None) -> tuple[str, str] | None:
        found = await self.store.version(doc.id)
        if found is None:
            return None
        version, chunks = found
        current = replace(doc, content_hash=version)
        picked = pick(chunks, hit.chunks if hit else [], self.per_document)
        return render(current, chunks, picked), version

    def _row(self, scope: Scope, doc: int, version: str, text: str, reason: str) -> NewInjection:
        return NewInjection(
            session=scope.session_pk,
            chat=scope.chat_pk,
            document=doc,
            content_hash=version,
            snapshot=hashlib.sha256(text.encode()).hexdigest(),
            text=text,
            tokens=estimate_tokens(text),
            reason=reason,
            at_ms=scope.now_ms,
        )

    def _item(
        self,
        doc: DocumentRow,
        text: str,
        version: str,
        reason: str,
        hit: Hit | None,
        linked: float | None,
    ) -> ContextItem:
        if hit is not None:
            relevance = 0.5 + 0.35 * hit.score
        elif linked is not None:
            relevance = 0.4 + 0.2 * linked
        else:
            relevance = 0.45
        stable = is_stable(policy_of(doc.type, doc.status))
        # A document cut to its relevant sections says so in `/context` (and `context_status`).
        if (cut := EXCERPT.search(text, 0, text.find("\n"))) is not None:
            reason = f"{reason}; an excerpt: {cut.group(1)}"
        return ContextItem(
            source=self.name,
            position=Position.SYSTEM_STABLE if stable else Position.SYSTEM,
            content=text,
            relevance=relevance,
            reason=reason,
            label=doc.title,
            content_hash=version,
            key=f"doc:{doc.id}",
        )

    async def assembled(self, scope: Scope, items: list[ContextItem]) -> None:
        """Keep what the request really carries, to record once the model has answered."""
        building = self._building.pop(scope.session_pk, None)
        if building is None:
            return
        rows = {k: building.rows[k] for k in (i.key for i in items) if k in building.rows}
        self._pending[scope.session_pk] = _Building(rows, building.refreshes)

    async def answered(self, session: int) -> None:
        """The model answered the turn's request: what it carried was injected."""
        done = self._pending.pop(session, None)
        if done is not None:
            await self.injections.record(
                list(done.rows.values()), refreshed_session=session if done.refreshes else None
            )

    def abandoned(self, session: int) -> None:
        """The turn ended without an answer (the model failed, or the turn was stopped)."""
        self._pending.pop(session, None)
        self._building.pop(session, None)


@dataclass(frozen=True, slots=True)
class _Building:
    rows: dict[str, NewInjection]  # by item key
    refreshes: bool  # carries out the session's pending `/context refresh`
