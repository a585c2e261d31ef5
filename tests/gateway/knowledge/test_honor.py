"""The honor test: over many turns, with documents edited, created and deleted between them,
what `/context` lists is exactly what the model received — compared by content hash, where
the test knows each version's hash from the bytes it wrote, not from anything Iris reports."""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import pytest

from gateway.core.clock import ManualClock
from gateway.core.llm import ToolResult
from gateway.knowledge import local_embedder
from gateway.knowledge.feature import KnowledgeFeature
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import knowledge_config, request_text, write

TOPICS = {
    "failover": ("runbook", ""),
    "rollback": ("runbook", ""),
    "postgres": ("adr", "accepted"),
    "billing": ("rfc", "draft"),
    "limits": ("rfc", "implemented"),
    "holidays": ("note", ""),
    "retention": ("decision", "accepted"),
}
_LISTED = re.compile(r"^  – (.+) · ([0-9a-f]{8}) · \d+ tokens", re.M)
_MARKER = re.compile(r"marker (\w+) v(\d+)")


class Files:
    """The documents on disk, and the sha256 of every version the test wrote."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.versions: dict[str, int] = {}
        self.hashes: dict[tuple[str, int], str] = {}

    def put(self, topic: str) -> None:
        version = self.versions.get(topic, 0) + 1
        self.versions[topic] = version
        kind, status = TOPICS[topic]
        text = (
            f"---\ntype: {kind}\nstatus: {status or 'accepted'}\n---\n"
            f"# {topic.title()} doc\n\nAll about {topic}. marker {topic} v{version}.\n"
            + ("\nMore detail. " * version)
        )
        write(self.root, f"{topic}.md", text)
        self.hashes[(topic, version)] = hashlib.sha256(text.encode()).hexdigest()

    def delete(self, topic: str) -> None:
        (self.root / "docs" / f"{topic}.md").unlink(missing_ok=True)
        self.versions.pop(topic, None)

    def received(self, text: str) -> set[tuple[str, str]]:
        """(title, short hash) of each document version whose text the model received."""
        return {
            (f"{t.title()} doc", self.hashes[(t, int(v))][:8]) for t, v in _MARKER.findall(text)
        }


@pytest.mark.parametrize("retrieval", ["lexical", "auto"])
async def test_context_lists_exactly_what_the_model_received(
    tmp_path: Path, retrieval: str
) -> None:
    """`auto` is the hybrid retrieval of the `semantic` extra (the local model, whose vectors
    are the same bits on every run), skipped without it."""
    if retrieval == "auto" and not local_embedder.AVAILABLE:
        pytest.skip("the semantic extra is not installed")
    rng = random.Random(11)
    llm, channel, clock = FakeLLM(), MemoryChannel(), ManualClock()
    files = Files(tmp_path)
    for topic in TOPICS:
        files.put(topic)
    config = knowledge_config(
        tmp_path, refresh_cooldown_seconds=30, knowledge_tokens=260, retrieval=retrieval
    )
    async with app_with(config, channel, llm, clock) as app:
        indexer = app.feature(KnowledgeFeature).indexer
        assert (app.feature(KnowledgeFeature).embedder is None) is (retrieval == "lexical")
        listed_any = stale_seen = 0
        for turn in range(30):
            question = " and ".join(rng.sample(sorted(TOPICS), k=rng.choice([1, 2, 3])))
            await app.router.submit(inbound(f"tell me about {question}"))
            await app.router.submit(inbound("/context"))
            report = channel.texts()[-1]
            listed = set(_LISTED.findall(report))
            received = files.received(request_text(llm.requests[-1]))
            assert listed == received, f"turn {turn}: {report}"
            listed_any += len(listed)
            stale_seen += report.count("— changed;")
            for _ in range(rng.choice([1, 2, 3])):  # the world changes between turns
                topic = rng.choice(sorted(TOPICS))
                action = rng.random()
                if action < 0.6:
                    files.put(topic)
                elif action < 0.7:
                    files.delete(topic)
                else:
                    await app.router.submit(inbound("/context refresh"))
            if rng.random() < 0.85:
                await indexer.scan()
            if rng.random() < 0.1:
                await app.router.submit(inbound("/clear"))
            clock.advance(rng.choice([1, 5, 10, 40]))
        reasons = {r[0] for r in await app.vault.fetchall("SELECT reason FROM context_injections")}
        # The paths that matter were taken: new documents, refreshes, and versions held back
        # (`requested` refreshes are driven step by step in test_injection.py).
        assert {"relevant", "session_start", "changed"} <= reasons, reasons
        assert stale_seen > 0
        assert listed_any > 20  # the test saw documents, not only empty contexts
        vectors = await app.vault.scalar("SELECT count(*) FROM knowledge_vectors")
        assert (vectors > 0) is (retrieval == "auto")  # hybrid really searched by meaning too


async def test_the_context_status_tool_reports_the_same_trace(tmp_path: Path) -> None:
    llm, channel = FakeLLM(), MemoryChannel()
    files = Files(tmp_path)
    files.put("failover")
    async with app_with(knowledge_config(tmp_path), channel, llm) as app:
        llm.enqueue_tool("context_status", {}).enqueue_text("I was given the failover doc.")
        await app.router.submit(inbound("what context do you have about failover?"))
        (result,) = llm.requests[-1].messages[-1].parts
        assert isinstance(result, ToolResult) and not result.is_error
        await app.router.submit(inbound("/context"))
        assert result.content == channel.texts()[-1]
        assert files.received(request_text(llm.requests[0])) == set(_LISTED.findall(result.content))
        assert "Failover doc" in result.content


async def test_context_tells_the_truth_after_a_restart(tmp_path: Path) -> None:
    """The trace is saved with the request: a restarted Iris (or another replica on the same
    vault) lists what the last request carried, not "nothing"."""
    llm, channel = FakeLLM(), MemoryChannel()
    files = Files(tmp_path)
    files.put("failover")
    config = knowledge_config(tmp_path)
    async with app_with(config, channel, llm) as app:
        await app.router.submit(inbound("tell me about failover"))
        await app.router.submit(inbound("/context"))
        before = channel.texts()[-1]
    received = files.received(request_text(llm.requests[-1]))
    assert received and set(_LISTED.findall(before)) == received
    async with app_with(config, channel, FakeLLM()) as app:
        await app.router.submit(inbound("/context"))
        assert channel.texts()[-1] == before
        await app.router.submit(inbound("/context trace"))
        assert channel.texts()[-1].startswith("Context trace (")
    async with app_with(config, channel, FakeLLM()) as app:
        await app.router.submit(inbound("/context", chat="someone-else", user="someone-else"))
        assert channel.texts()[-1].startswith("No model request in this chat yet")


async def test_context_after_clear_says_the_listed_request_came_before_it(tmp_path: Path) -> None:
    """After /clear the next request starts without the old history: `/context` must not
    present the request before the clear as this conversation's context."""
    llm, channel = FakeLLM(), MemoryChannel()
    files = Files(tmp_path)
    files.put("failover")
    async with app_with(knowledge_config(tmp_path), channel, llm) as app:
        await app.router.submit(inbound("tell me about failover"))
        await app.router.submit(inbound("/context"))
        before = channel.texts()[-1]
        assert before.startswith("Context of the last model request here")
        await app.router.submit(inbound("/clear"))
        await app.router.submit(inbound("/context"))
        after = channel.texts()[-1]
        assert after.startswith("No model request since this conversation was cleared")
        assert set(_LISTED.findall(after)) == set(_LISTED.findall(before))  # shown as before
        await app.router.submit(inbound("and the rollback?"))
        await app.router.submit(inbound("/context"))
        assert channel.texts()[-1].startswith("Context of the last model request here")
