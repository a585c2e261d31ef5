"""The injection audit is written for answered requests only, and what staleness decisions read
lives in the vault: a failed model call gives nothing, and a `/context refresh` (with its
cooldown) survives a restart."""

from __future__ import annotations

import itertools
from pathlib import Path

from gateway.app.app import App
from gateway.core.clock import ManualClock
from gateway.core.errors import ModelUnavailable
from gateway.knowledge.feature import KnowledgeFeature
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import documents_in, knowledge_config, write
from vault.db import Vault

RUNBOOK = "---\ntype: runbook\n---\n# Failover runbook\n\nPromote the replica: {step}.\n"
RFC = "---\ntype: rfc\nstatus: implemented\n---\n# RFC 012: Rate limits\n\nBuckets of {n} tokens.\n"


async def audit(vault: Vault) -> list[tuple[str, str, str]]:
    rows = await vault.fetchall(
        """SELECT d.path, i.reason, substr(i.content_hash, 1, 8) FROM context_injections i
           JOIN knowledge_documents d ON d.id = i.document ORDER BY i.id"""
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def test_a_failed_model_call_records_no_injection(tmp_path: Path) -> None:
    path = "docs/runbooks/failover.md"
    write(tmp_path, "runbooks/failover.md", RUNBOOK.format(step="patronictl"))
    llm, channel = FakeLLM(), MemoryChannel()
    config = knowledge_config(tmp_path, refresh_cooldown_seconds=30)
    async with app_with(config, channel, llm, ManualClock()) as app:
        llm.enqueue_error(ModelUnavailable("model API unavailable (HTTP 529)"))
        await app.router.submit(inbound("failover: promote the replica", message_id="m1"))
        assert path in documents_in(llm.requests[-1])  # the request carried it ...
        assert "unavailable" in channel.texts()[-1]
        assert await audit(app.vault) == []  # ... but the model never saw it
        # The next request gives it as new, and that one is recorded.
        await app.router.submit(inbound("failover: promote the replica", message_id="m2"))
        assert path in documents_in(llm.requests[-1])
        assert [(p, r) for p, r, _ in await audit(app.vault)] == [(path, "relevant")]
        assert "relevant" in await _command(app, channel, "/context why failover")


_ids = itertools.count(1)


async def _command(app: App, channel: MemoryChannel, text: str) -> str:
    await app.router.submit(inbound(text, message_id=f"cmd{next(_ids)}"))
    return channel.texts()[-1]


async def test_a_refresh_request_and_its_cooldown_survive_a_restart(tmp_path: Path) -> None:
    path = "docs/rfc/012.md"
    write(tmp_path, "rfc/012.md", RFC.format(n=20))
    config = knowledge_config(tmp_path, refresh_cooldown_seconds=30)
    clock = ManualClock()
    llm, channel = FakeLLM(), MemoryChannel()
    async with app_with(config, channel, llm, clock) as app:
        await app.router.submit(inbound("what are the rate limits buckets?", message_id="m1"))
        write(tmp_path, "rfc/012.md", RFC.format(n=50))
        clock.advance(60)
        reply = await _command(app, channel, "/context refresh")
        assert "new version of: RFC 012: Rate limits" in reply
    # Iris restarts before the next message.
    llm, channel = FakeLLM(), MemoryChannel()
    async with app_with(config, channel, llm, clock) as app:
        clock.advance(5)
        cooling = await _command(app, channel, "/context refresh")
        assert "refreshed in this conversation less than 30 seconds ago" in cooling
        # A failed call does not use the request up ...
        llm.enqueue_error(ModelUnavailable("model API unavailable (HTTP 529)"))
        await app.router.submit(inbound("rate limits buckets?", message_id="m2"))
        assert "50 tokens" in documents_in(llm.requests[-1])[path][1]
        # ... the next answered request carries it out, once.
        await app.router.submit(inbound("rate limits buckets?", message_id="m3"))
        assert "50 tokens" in documents_in(llm.requests[-1])[path][1]
        assert [(p, r) for p, r, _ in await audit(app.vault)] == [
            (path, "relevant"),
            (path, "requested"),
        ]
        pending = await app.vault.scalar("SELECT pending FROM context_refresh_requests")
        assert pending == 0
        feature = app.feature(KnowledgeFeature)
        assert not feature.provider._pending and not feature.provider._building


async def test_refresh_names_the_skipped_files_this_chat_may_see(tmp_path: Path) -> None:
    write(tmp_path, "notes/ok.md", "# Fine\n\nText.\n")
    write(tmp_path, "notes/blob.md", b"\x00\x01binary")
    write(tmp_path, "hr/salaries.md", b"\x00\x01binary")  # under a scope this chat is outside
    config = knowledge_config(tmp_path, scopes={"docs/hr/**": ["chat:memory:hr"]})
    llm, channel = FakeLLM(), MemoryChannel()
    write(tmp_path, "hr/plan.md", "# HR plan\n\nText.\n")
    write(tmp_path, "hr/old.md", "# HR old\n\nText.\n")
    async with app_with(config, channel, llm) as app:
        first = await _command(app, channel, "/context refresh")  # the first index, here
        write(tmp_path, "notes/ok.md", "# Fine\n\nNew text.\n")
        write(tmp_path, "hr/plan.md", "# HR plan\n\nNew text.\n")
        (tmp_path / "docs" / "hr" / "old.md").unlink()
        reply = await _command(app, channel, "/context refresh")
    # Files under a scope this chat is outside of are not even counted.
    assert first.startswith("Rescanned: 1 updated, 0 removed, 1 skipped (docs/notes/blob.md).")
    assert reply.startswith("Rescanned: 1 updated, 0 removed, 1 skipped (docs/notes/blob.md).")
    assert "salaries" not in reply
