"""The knowledge index and the injection audit in the vault: versions replace each other
whole, scope is a required filter, retired documents are never found, and the audit is what
staleness reads."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes import inbound
from tests.vault.conftest import MakeVault
from vault.conversations import Conversations
from vault.db import Vault
from vault.injections import InjectionLog, NewInjection
from vault.knowledge import DocumentVersion, KnowledgeStore, NewChunk
from vault.migrations import migrate


@pytest.fixture
async def vault(make_vault: MakeVault) -> AsyncIterator[Vault]:
    async with make_vault() as v:
        await migrate(v)
        yield v


def version(path: str, text: str, *, scope: str | None = None, ref: str | None = None,
            edges: tuple[tuple[str, str, float], ...] = ()) -> DocumentVersion:  # fmt: skip
    chunks = tuple(
        NewChunk(heading=f"{path} › {n}", text=part, tokens=len(part) // 4 + 1, hash=f"h-{part}")
        for n, part in enumerate(text.split("|"))
    )
    return DocumentVersion(
        path=path, title=path.upper(), type="note", status="", ref_key=ref, scope=scope,
        content_hash=f"sha-{text}", size=len(text), mtime_ns=1, tokens=10, chunks=chunks,
        edges=edges,
    )  # fmt: skip


async def test_a_new_version_replaces_chunks_and_search_follows(vault: Vault) -> None:
    store = KnowledgeStore(vault)
    await store.apply(versions=[version("a.md", "postgres failover|replica promote")], now_ms=1)
    (hit,) = {r["document"] for r in await store.search('"failover"', set(), 10)}
    await store.apply(versions=[version("a.md", "kafka consumer lag")], now_ms=2)
    assert await store.search('"failover"', set(), 10) == []
    assert [r["document"] for r in await store.search('"kafka"', set(), 10)] == [hit]
    found = await store.version(hit)
    assert found is not None and found[0] == "sha-kafka consumer lag" and len(found[1]) == 1


async def test_scope_is_a_required_filter(vault: Vault) -> None:
    store = KnowledgeStore(vault)
    await store.apply(
        versions=[version("team/plan.md", "secret roadmap", scope="team/**"),
                  version("public.md", "public roadmap")],
        now_ms=1,
    )  # fmt: skip
    outside = await store.search('"roadmap"', set(), 10)
    inside = await store.search('"roadmap"', {"team/**"}, 10)
    assert len(outside) == 1 and len(inside) == 2
    assert [d.path for d in await store.visible(set())] == ["public.md"]
    ids = {r["document"] for r in inside}
    assert [d.path for d in await store.documents(ids, set())] == ["public.md"]


async def test_retired_documents_are_never_found_again(vault: Vault) -> None:
    store = KnowledgeStore(vault)
    await store.apply(versions=[version("a.md", "failover"), version("b.md", "other")], now_ms=1)
    states = await store.file_states()
    a = states["a.md"].id
    await store.apply(retired=["a.md"], now_ms=2)
    assert await store.search('"failover"', set(), 10) == []
    assert await store.documents({a}, set()) == []
    assert await store.version(a) is None
    assert set(await store.file_states()) == {"b.md"}
    assert (await store.any_documents({a}))[a].retired_ms == 2  # the audit can still name it


async def test_edges_resolve_by_path_and_by_reference_key(vault: Vault) -> None:
    store = KnowledgeStore(vault)
    await store.apply(
        versions=[
            version("rfc.md", "x", edges=(("adr:1", "explicit", 1.0), ("runbook.md", "link", 0.6),
                                          ("missing.md", "link", 0.6))),
            version("adr.md", "y", ref="adr:1"),
            version("runbook.md", "z", scope="ops/**"),
        ],
        now_ms=1,
    )  # fmt: skip
    ids = {p: d.id for p, d in (await store.file_states()).items()}
    edges = await store.edges_from({ids["rfc.md"]}, set())
    assert [(e.target, e.kind) for e in edges] == [(ids["adr.md"], "explicit")]
    edges = await store.edges_from({ids["rfc.md"]}, {"ops/**"})
    assert {e.target for e in edges} == {ids["adr.md"], ids["runbook.md"]}


async def test_vectors_are_cached_per_chunk_hash(vault: Vault) -> None:
    store = KnowledgeStore(vault)
    await store.apply(versions=[version("a.md", "one|two"), version("b.md", "two")], now_ms=1)
    missing = await store.missing_vectors("m1")
    assert sorted(h for h, _ in missing) == ["h-one", "h-two"]  # "two" is embedded once
    await store.put_vectors("m1", [("h-one", b"\0" * 8), ("h-two", b"\1" * 8)])
    assert await store.missing_vectors("m1") == []
    assert len(await store.missing_vectors("m2")) == 2
    assert len(await store.vectors("m1")) == 3


async def test_the_audit_gives_the_working_set_and_the_last_refresh(vault: Vault) -> None:
    store = KnowledgeStore(vault)
    await store.apply(versions=[version("a.md", "x"), version("b.md", "y")], now_ms=1)
    ids = {p: d.id for p, d in (await store.file_states()).items()}
    recorded = await Conversations(vault).record_inbound(
        inbound("hi"), kind="chat", tokens=1, now_ms=1
    )
    assert recorded is not None
    log = InjectionLog(vault)

    def row(doc: str, version: str, reason: str, at: int) -> NewInjection:
        return NewInjection(
            session=recorded.session_pk, chat=recorded.chat_pk, document=ids[doc],
            content_hash=version, snapshot=f"snap-{version}", text=f"text {version}", tokens=3,
            reason=reason, at_ms=at,
        )  # fmt: skip

    assert await log.last_refresh_ms(recorded.session_pk) is None
    await log.record([row("a.md", "v1", "relevant", 10), row("b.md", "w1", "linked", 10)])
    await log.record([row("a.md", "v2", "changed", 20)])
    given = await log.working_set(recorded.session_pk)
    assert given[ids["a.md"]].injection.content_hash == "v2"
    assert given[ids["a.md"]].text == "text v2"
    assert given[ids["b.md"]].injection.reason == "linked"
    assert await log.last_refresh_ms(recorded.session_pk) == 20
    history = await log.history(recorded.chat_pk, ids["a.md"])
    assert [(i.reason, i.content_hash) for i in history] == [("changed", "v2"), ("relevant", "v1")]


async def test_term_frequencies_count_chunks(vault: Vault) -> None:
    store = KnowledgeStore(vault)
    await store.apply(versions=[version("a.md", "kafka lag|kafka topics"), version("b.md", "lag")],
                      now_ms=1)  # fmt: skip
    total, frequency = await store.term_frequencies(["kafka", "lag", "absent"])
    assert total == 3 and frequency == {"kafka": 2, "lag": 2}
