"""Team knowledge as a feature: documents indexed from files, injected by relevance under
refresh policies, audited, and `/context` that tells the truth about it.

It contributes the `documents` context provider and the `documents_search` tool (also offered
to the proactive gate) when `[context] documents` names files and `knowledge_tokens` > 0, the
background rescan whenever documents are named (suggestions and subscriptions read the index
even with injection off), `/context` (every chat), the `context_status` model tool, the admin API's
`GET`/`POST /context/providers`, and a step that applies the providers' stored on/off and
priorities before the first turn that needs them. `base` is the
folder the document globs are relative to (the config file's); `embedder` is the local model
when the `semantic` extra is installed, else None (lexical retrieval).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.agent.tools import Tool
from gateway.core.admin_ops import JSON
from gateway.core.embedding import Embedder
from gateway.core.errors import VaultError
from gateway.core.scope import Scope
from gateway.features.contributions import ApiRead, ApiWrite, Contributions
from gateway.knowledge.commands import ContextCommands
from gateway.knowledge.events import ProviderEvents, as_json
from gateway.knowledge.indexer import Indexer
from gateway.knowledge.provider import KnowledgeProvider
from gateway.knowledge.report import render
from gateway.knowledge.retrieval import Retriever
from gateway.knowledge.rules import PathRules
from gateway.knowledge.search_tool import documents_search_tool
from gateway.knowledge.settings import KnowledgeSection
from gateway.turns.turn import Next, Step, Turn
from vault.audit import AuditLog
from vault.context_settings import ContextSettings
from vault.injections import InjectionLog
from vault.knowledge import KnowledgeStore
from vault.periodic import PeriodicRuns

log = logging.getLogger(__name__)

STATUS_TOOL = (
    "What context you were given for this request: each source with its tokens, the team "
    "documents by title with their content hash and why each was included, and what was left "
    "out. Use it to answer questions about what you know or can see, instead of guessing."
)


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProviderChange(BaseModel):
    """A change to one context provider: switch it on or off, and/or set its priority."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    enabled: bool | None = None
    priority: int | None = Field(None, ge=-1000, le=1000)


class KnowledgeFeature:
    name = "knowledge"

    def __init__(
        self, settings: KnowledgeSection, *, base: Path, embedder: Embedder | None = None
    ) -> None:
        self.settings = settings
        self.base = base
        self.embedder = embedder if settings.retrieval == "auto" else None

    def contribute(self, c: Contributions) -> None:
        s = c.services
        self.store = KnowledgeStore(s.vault)
        self.injections = InjectionLog(s.vault)
        self.rules = PathRules(self.settings.types, self.settings.scopes)
        self.retriever = Retriever(self.store, self.embedder)
        self.indexer = Indexer(
            store=self.store,
            settings=self.settings,
            base=self.base,
            rules=self.rules,
            clock=s.clock,
            embedder=self.embedder,
            on_change=self.retriever.invalidate,
            # Replicas share the index: one of them rescans per slot of rescan_seconds.
            periodic=PeriodicRuns(s.vault, s.replica_id or "this process")
            if s.vault.dialect == "postgresql"
            else None,
        )
        self.provider = KnowledgeProvider(
            store=self.store,
            injections=self.injections,
            retriever=self.retriever,
            indexer=self.indexer,
            rules=self.rules,
            conversations=s.conversations,
            settings=self.settings,
        )
        self.events = ProviderEvents(
            pipeline=s.pipeline, store=ContextSettings(s.vault), audit=AuditLog(s.vault),
            clock=s.clock,
        )  # fmt: skip
        self.commands = ContextCommands(
            traces=s.traces,
            provider=self.provider,
            indexer=self.indexer,
            store=self.store,
            injections=self.injections,
            rules=self.rules,
            events=self.events,
        )
        if self.settings.documents:
            # Kept current even with injection off: suggestions, subscriptions and
            # `/context docs` read the index.
            c.background(self.indexer.run)
        if self.settings.documents and self.settings.knowledge_tokens > 0:
            c.provider(self.provider)
            c.tool(documents_search_tool(store=self.store, retriever=self.retriever,
                                         indexer=self.indexer, rules=self.rules))  # fmt: skip
        c.command(self.commands.command())
        c.step(self._load_step())
        traces = s.traces

        async def context_status(scope: Scope, args: NoArgs) -> str:
            return render(await traces.latest(scope.chat.key), scope)

        c.tool(Tool("context_status", STATUS_TOOL, NoArgs, context_status))
        c.api_read(ApiRead("/context/providers", "Context providers per phase", self._api_list,
                           takes_user=False))  # fmt: skip
        c.api_write(
            ApiWrite(
                "/context/providers",
                "Switch a context provider on or off, or set its priority",
                ProviderChange,
                self._api_change,
            )
        )

    def _load_step(self) -> Step:
        """Applies the stored provider settings before the first turn that needs them, and
        records the documents a request carried once the model has answered it."""

        async def load(turn: Turn, nxt: Next) -> None:
            await self.events.ensure_loaded()
            try:
                await nxt(turn)
            except BaseException:
                if turn.scope is not None:
                    self.provider.abandoned(turn.scope.session_pk)
                raise
            if turn.scope is not None:
                try:
                    await self.provider.answered(turn.scope.session_pk)
                except VaultError:  # the reply is out; the audit misses one request
                    log.exception("could not record the documents given to %s", turn.scope.chat.key)

        return load

    async def _api_list(self, user: str | None) -> JSON:
        return {"providers": [as_json(p) for p in await self.events.listing()]}

    async def _api_change(self, body: Any) -> JSON:
        assert isinstance(body, ProviderChange)
        info = await self.events.change(
            body.name,
            enabled=body.enabled,
            priority=body.priority,
            actor="api",
            via="http",
            audited=False,  # the admin API audits every call itself
        )
        return as_json(info)
