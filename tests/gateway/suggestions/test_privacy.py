"""A randomized check of the finder's scope: over generated users, DMs, groups, scoped
documents, memories and follow-ups sharing one vocabulary (so everything matches everything),
no candidate is ever outside the chat's scope."""

from __future__ import annotations

import random
from pathlib import Path

from gateway.suggestions.finder import ItemType
from tests.gateway.knowledge.support import write
from tests.gateway.suggestions.support import world_for

_WORD_TEXT = "deploy canary rollback kafka replica invoice carrier webhook budget cluster"
WORDS = _WORD_TEXT.split()
USERS = [f"u{n}" for n in range(6)]
GROUPS = ["g1", "g2", "g3"]
CASES = 400


def sentence(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, 4))


async def test_no_candidate_is_ever_out_of_scope(tmp_path: Path) -> None:
    rng = random.Random(12)
    scopes = {
        "docs/team-g1/**": ["chat:memory:g1"],
        "docs/u0-only/**": ["user:memory:u0"],
        "docs/g2-and-u1/**": ["chat:memory:g2", "user:memory:u1"],
    }
    folders: dict[str, str | None] = {
        "public": None,
        "team-g1": "g1",
        "u0-only": "u0",
        "g2-and-u1": "g2|u1",
    }
    for n in range(24):
        folder = rng.choice(list(folders))
        write(tmp_path, f"{folder}/doc{n}.md", f"# Doc {n}: {sentence(rng)}\n\n{sentence(rng)}.\n")
    async with world_for(tmp_path, scopes=scopes) as w:
        titles: dict[str, str] = {}
        for row in await w.app.vault.fetchall("SELECT path, title FROM knowledge_documents"):
            top = row[0].split("/")[1]  # docs/<folder>/…; the fixture's own are public
            titles[row[1]] = top if top in folders else "public"
        chats = {(u, f"dm-{u}", False) for u in USERS} | {
            (u, g, True) for u in USERS for g in GROUPS
        }
        scope_of = {c: await w.scope(c[0], c[1], group=c[2]) for c in sorted(chats)}
        memory_owner: dict[str, str] = {}
        follow_up_of: dict[str, tuple[str, str]] = {}
        for (user, chat, _), scope in scope_of.items():
            if rng.random() < 0.7:
                memory_owner[f"memory:{await w.remember(scope, sentence(rng))}"] = user
            if rng.random() < 0.5:
                key = f"followup:{await w.follow_up(scope, sentence(rng))}"
                follow_up_of[key] = (user, chat)
        seen = {ItemType.MEMORY: 0, ItemType.FOLLOWUP: 0, ItemType.DOC: 0}
        for _ in range(CASES):
            user, chat, group = rng.choice(sorted(chats))
            found = await w.feature.finder.find(scope_of[(user, chat, group)], sentence(rng),
                                                limit=50)  # fmt: skip
            for c in found:
                if c.type is ItemType.MEMORY:
                    assert not group and memory_owner[c.key] == user, (c, user, chat)
                elif c.type is ItemType.FOLLOWUP:
                    assert follow_up_of[c.key] == (user, chat), (c, user, chat)
                else:
                    owners = folders[titles[c.title]]
                    allowed = (
                        owners is None
                        or chat in owners.split("|")
                        or (not group and user in owners.split("|"))
                    )
                    assert allowed, (c.title, titles[c.title], user, chat, group)
                seen[ItemType.DOC if c.key.startswith("doc:") else c.type] += 1
        assert all(n > 0 for n in seen.values()), seen  # the check had something to check
