"""Randomized privacy check (fixed seed): over generated users, DMs, groups and scoped
documents, no item of anyone else's leaves — not from the finder, not in a subscription's
events, not in `/context`, not in a model request.

Every private thing carries a marker word of its own (a memory `mk<user>`, a scoped document
`dk<scope>`) that no message ever contains, so "foreign" is decided by the generator's own
ground truth, never by the code under test: a memory may only appear in its owner's DM; a
chat-scoped document only in that chat; a user-scoped one only in that user's DM; a public
document anywhere. Each case draws a user, one of their chats and a message on the shared
subjects; it is asked of the finder; one case in 8 also goes to the subscription engine (four
subscriptions: unfiltered, a DM filter, a group filter, a user filter), one in 50 is a whole turn
(the model request) and one in 250 also asks `/context docs`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from gateway.app.app import App
from gateway.core.messages import ChatKind
from gateway.core.scope import Scope
from gateway.knowledge.feature import KnowledgeFeature
from gateway.subscriptions.api import SubscriptionOps
from gateway.subscriptions.feature import SubscriptionsFeature
from gateway.subscriptions.schema import SubscriptionRequest
from gateway.suggestions.feature import SuggestionsFeature
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import knowledge_config, write

CASES = 10_000
BATCH = 1000
SEED = 20261123
USERS = ["u1", "u2", "u3", "u4", "u5"]
GROUPS = {"ga": ["u1", "u2", "u3"], "gb": ["u3", "u4", "u5"]}
SUBJECTS = ["deploy", "billing", "runbook", "failover", "replica", "invoice", "release"]
FILLER = ["please", "check", "again", "tomorrow", "team", "status", "notes", "about", "the"]
MARKER = re.compile(r"\b(mk\w+|dk\w+)\b")


def allowed_markers(user: str, chat: str, in_group: bool) -> set[str]:
    """The ground truth: what may be seen by `user` in `chat`."""
    allowed = {"dkpublic"}
    if not in_group:
        allowed |= {f"mk{user}", f"dk{user}"}
    if chat in GROUPS:
        allowed.add(f"dk{chat}")
    return allowed


def markers(text: str) -> set[str]:
    return set(MARKER.findall(text))


def request_text(request: Any) -> str:
    return repr(request)


async def _world(tmp_path: Path) -> tuple[App, FakeLLM, MemoryChannel, Any]:
    scopes = {f"docs/{g}/**": [f"chat:memory:{g}"] for g in GROUPS}
    scopes |= {f"docs/{u}/**": [f"user:memory:{u}"] for u in USERS}
    config = knowledge_config(tmp_path, scopes=scopes)
    write(tmp_path, "public/deploy.md", "# Deploy guide\n\ndkpublic deploy release billing.\n")
    for name in [*GROUPS, *USERS]:
        text = f"# Runbook {name}\n\ndk{name} deploy billing failover replica invoice.\n"
        write(tmp_path, f"{name}/runbook.md", text)
    llm, channel = FakeLLM(), MemoryChannel()
    return app_with(config, channel, llm), llm, channel, tmp_path


async def test_no_foreign_item_in_suggestions_events_context_or_model_requests(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    app_cm, llm, channel, _ = await _world(tmp_path)
    async with app_cm as app:
        await app.feature(KnowledgeFeature).indexer.scan()
        finder = app.feature(SuggestionsFeature).finder
        subs = app.feature(SubscriptionsFeature)
        scopes: dict[tuple[str, str], Scope] = {}

        real_message = subs.engine.message

        async def capture(scope: Scope) -> None:
            scopes[(scope.user.user_id, scope.chat.chat_id)] = scope
            await real_message(scope)

        subs.engine.message = capture  # type: ignore[method-assign]
        for user in USERS:
            await app.router.submit(inbound("hello", user=user, chat=user))
            pk = await app.vault.scalar("SELECT id FROM users WHERE user_id = ?", (user,))
            for subject in rng.sample(SUBJECTS, 3):
                await app.memories.remember(pk, f"mk{user} notes on {subject} and billing", 0)
        for group, members in GROUPS.items():
            for user in members:
                await app.router.submit(
                    inbound("hi all", user=user, chat=group, kind=ChatKind.GROUP, mentioned=True)
                )
        ops: SubscriptionOps = subs.ops
        for extra in ({}, {"chats": ["memory:u1"]}, {"chats": ["memory:ga"]},
                      {"users": ["memory:u3"]}):  # fmt: skip
            body = {
                "patterns": [{"type": "entity", "pattern": "\\w", "keywords": ["deploy"]}],
                "callback": "poll",
                "min_relevance": 0.0,
                "cooldown_seconds": 0,
                **extra,
            }
            await ops.create(SubscriptionRequest.model_validate(body), owner="api")  # fmt: skip

        chats = [(u, u, False) for u in USERS]
        chats += [(u, g, True) for g, members in GROUPS.items() for u in members]
        foreign: list[str] = []
        checked = {"finder": 0, "events": 0, "turns": 0, "context": 0, "memories": 0, "docs": 0}

        def check(where: str, text: str, allowed: Collection[str]) -> None:
            leaked = markers(text) - set(allowed)
            if leaked:
                foreign.append(f"{where}: {sorted(leaked)} in {text[:200]!r}")

        cases = []
        for n in range(CASES):
            user, chat, in_group = rng.choice(chats)
            words = rng.sample(SUBJECTS, rng.randint(1, 3)) + rng.sample(FILLER, 2)
            rng.shuffle(words)
            text = " ".join(words)
            base = scopes[(user, chat)]
            scope = dataclasses.replace(base, text=text, now_ms=base.now_ms + n)
            cases.append((n, user, chat, in_group, scope))
        for start in range(0, CASES, BATCH):  # concurrent reads share the vault's hops
            batch = cases[start : start + BATCH]
            found = await asyncio.gather(*(finder.find(c[4], c[4].text, limit=5) for c in batch))
            for (n, user, chat, in_group, scope), candidates in zip(batch, found, strict=True):
                allowed = allowed_markers(user, chat, in_group)
                for c in candidates:
                    check(f"finder {user}@{chat}", f"{c.title} {c.summary} {c.content}", allowed)
                    checked["finder"] += 1
                    checked["memories" if c.key.startswith("memory:") else "docs"] += 1
                if n % 8 == 0:
                    await real_message(scope)
                kind = ChatKind.GROUP if in_group else ChatKind.DM
                if n % 50 == 0:
                    await app.router.submit(
                        inbound(scope.text, user=user, chat=chat, kind=kind, mentioned=in_group)
                    )
                    check(f"model request {user}@{chat}", request_text(llm.requests[-1]), allowed)
                    checked["turns"] += 1
                if n % 250 == 0:
                    ask = inbound("/context docs", user=user, chat=chat, kind=kind,
                                  mentioned=in_group)  # fmt: skip
                    await app.router.submit(ask)
                    check(f"/context {user}@{chat}", channel.sent[-1].text, allowed)
                    checked["context"] += 1

        readers_of = {g: set(m) for g, m in GROUPS.items()}
        for sub in await subs.store.listing():
            for event in await subs.store.events_since(sub.id, 0, 1_000_000):
                trigger = event.payload["suggestion"]["trigger"]
                chat_id = trigger["chat"].partition(":")[2]
                in_group = chat_id in readers_of
                # The event concerns the chat: whoever wrote, only what all its readers may see.
                readers = readers_of[chat_id] if in_group else {chat_id}
                allowed = set.intersection(
                    *(allowed_markers(u, chat_id, in_group) for u in readers)
                )
                if not sub.chats:  # the listener is no chat: scoped documents are not for it
                    allowed = {m for m in allowed if not m.startswith("dk") or m == "dkpublic"}
                for entry in event.payload["suggestion"]["items"]:
                    check(f"event {sub.id} {trigger['chat']}", str(entry), allowed)
                    checked["events"] += 1
                if sub.chats:
                    assert trigger["chat"] in sub.chats

        assert foreign == [], "\n".join(foreign[:20])
        # The check had something to look at on every surface.
        assert checked["memories"] > 1000 and checked["docs"] > 1000, checked
        assert checked["finder"] > CASES // 2 and checked["events"] > CASES // 20, checked
        assert checked["turns"] == CASES // 50 and checked["context"] == CASES // 250
