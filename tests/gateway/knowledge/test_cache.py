"""Stable documents sit in the cacheable prefix in a stable order: the second turn of a
conversation reads them from the prompt cache, even when the changing documents change."""

from __future__ import annotations

from pathlib import Path

from gateway.knowledge.feature import KnowledgeFeature
from tests.conftest import app_with
from tests.fakes import MemoryChannel, inbound
from tests.fakes.caching_llm import CachingLLM, cache_share
from tests.gateway.knowledge.support import knowledge_config, write

ADR = "---\ntype: adr\nstatus: accepted\n---\n# ADR {n}: {topic}\n\n{body}\n"


async def test_the_second_turn_reads_the_stable_documents_from_cache(tmp_path: Path) -> None:
    for n, topic in enumerate(["postgres storage", "kafka events", "grpc calls"], start=1):
        write(tmp_path, f"adr/{n}.md", ADR.format(n=n, topic=topic, body=f"{topic} rules " * 80))
    write(tmp_path, "runbooks/lag.md", "# Lag runbook\n\nkafka postgres grpc lag steps.\n")
    llm = CachingLLM()
    async with app_with(knowledge_config(tmp_path), MemoryChannel(), llm) as app:
        await app.router.submit(inbound("postgres storage, kafka events and grpc calls?"))
        write(tmp_path, "runbooks/lag.md", "# Lag runbook\n\nkafka postgres grpc lag, new steps.\n")
        await app.feature(KnowledgeFeature).indexer.scan()  # the runbook changed: refreshed
        await app.router.submit(inbound("and the lag of postgres kafka grpc?"))
        rows = await app.vault.fetchall("SELECT reason FROM context_injections")
        assert sorted(r[0] for r in rows).count("changed") == 1
    first, second = llm.responses
    assert first.cache_read_tokens == 0 and first.cache_write_tokens > 0
    assert second.cache_read_tokens == first.cache_write_tokens
    assert cache_share(second) > 0.5
