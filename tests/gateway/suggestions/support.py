"""Shared helpers of the suggestion tests: the real app with team documents under `tmp_path`,
a fake model, a memory channel and a manual clock, and ways to seed memories and follow-ups."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.messages import ChatKind, ChatRef, UserRef
from gateway.core.scope import Scope
from gateway.knowledge.feature import KnowledgeFeature
from gateway.suggestions.feature import SuggestionsFeature
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import knowledge_config, write
from vault.proactive.store import ProactiveStore

DEPLOY = (
    "---\ntype: runbook\n---\n# Runbook: rolling back a deploy\n\n"
    "When a canary deploy fails, roll back to the previous release in the deploy tool.\n"
)
FLAGS = (
    "---\ntype: adr\nstatus: accepted\n---\n# ADR 0005: Feature flags through one flag service\n\n"
    "Every feature flag lives in the self-hosted flag service.\n"
)
MONOREPO = (
    "---\ntype: adr\nstatus: superseded\n---\n# ADR 0003: One monorepo for all code\n\n"
    "All services live in one monorepo repository.\n"
)
SALARIES = (
    "# Salary bands for engineers\n\nSalary bands and compensation for each engineer level.\n"
)


class World:
    def __init__(
        self, app: App, llm: FakeLLM, channel: MemoryChannel, clock: ManualClock, root: Path
    ) -> None:
        self.app, self.llm, self.channel, self.clock, self.root = app, llm, channel, clock, root

    @property
    def feature(self) -> SuggestionsFeature:
        return self.app.feature(SuggestionsFeature)

    async def say(self, text: str, **kw: Any) -> list[str]:
        """Send a message; what the channel got for it (the reply, then any block)."""
        before = len(self.channel.sent)
        await self.app.router.submit(inbound(text, **kw))
        return [o.text for o in self.channel.sent[before:]]

    async def rescan(self) -> None:
        await self.app.feature(KnowledgeFeature).indexer.scan()

    async def scope(self, user: str = "u1", chat: str = "c1", *, group: bool = False) -> Scope:
        """A scope for this user and chat (recorded by a first message)."""
        kind = ChatKind.GROUP if group else ChatKind.DM
        recorded = await self.app.conversations.record_inbound(
            inbound("hello", user=user, chat=chat, kind=kind), kind="chat", tokens=1,
            now_ms=self.clock.now_ms(),
        )  # fmt: skip
        assert recorded is not None
        return Scope(user=UserRef(channel="memory", user_id=user),
                     chat=ChatRef(channel="memory", chat_id=chat), user_pk=recorded.user_pk,
                     chat_pk=recorded.chat_pk, session_pk=recorded.session_pk,
                     message_pk=recorded.message_pk, text="", now_ms=self.clock.now_ms(),
                     in_group=group)  # fmt: skip

    async def remember(self, scope: Scope, text: str) -> int:
        """A memory saved a minute ago (one saved during a turn is never suggested in it)."""
        return await self.app.memories.remember(scope.user_pk, text, self.clock.now_ms() - 60_000)

    async def follow_up(self, scope: Scope, what: str) -> int:
        return await ProactiveStore(self.app.vault).add_intent(
            chat=scope.chat_pk, user=scope.user_pk, what=what, why="", confidence=0.8,
            kind="ai", exact_time=False, execute_at=self.clock.now_ms() + 86_400_000,
            now_ms=self.clock.now_ms() - 60_000,
        )  # fmt: skip


@asynccontextmanager
async def world_for(
    tmp_path: Path,
    *,
    scopes: dict[str, list[str]] | None = None,
    knowledge_tokens: int = 0,
    **suggestions: Any,
) -> AsyncIterator[World]:
    """By default documents are indexed but not injected into requests (`knowledge_tokens`
    0), so what the block shows does not depend on what retrieval already gave the model.
    `boss` is an admin."""
    for name, text in (("deploy.md", DEPLOY), ("flags.md", FLAGS), ("monorepo.md", MONOREPO),
                       ("private/salaries.md", SALARIES)):  # fmt: skip
        write(tmp_path, name, text)
    base = knowledge_config(tmp_path, scopes=scopes or {})
    context = {
        "documents": ["docs/**/*.md"],
        "retrieval": "lexical",
        "scopes": scopes or {},
        "knowledge_tokens": knowledge_tokens,
    }
    auth: dict[str, object] = {"allow": ["memory:*"], "admins": ["memory:boss"]}
    config = replace(make_config(tmp_path, context=context, suggestions=suggestions, auth=auth),
                     source=base.source)  # fmt: skip
    llm, channel, clock = FakeLLM(), MemoryChannel(), ManualClock()
    async with app_with(config, channel, llm, clock) as app:
        world = World(app, llm, channel, clock, tmp_path)
        await world.rescan()
        yield world
