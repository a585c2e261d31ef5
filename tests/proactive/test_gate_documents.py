"""The gate looks up team documents before deciding, through the real app wiring (the knowledge
feature's `documents_search`), and a group's gate never sees a user-scoped document."""

from __future__ import annotations

from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.core.llm import ToolResult
from gateway.core.messages import ChatKind
from proactive.feature import ProactiveFeature
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.gateway.knowledge.support import knowledge_config, write


async def test_the_gate_searches_documents_within_the_chats_scope(tmp_path: Path) -> None:
    write(tmp_path, "runbook.md", "# Release 4.2\nThe 4.2 release shipped on Monday.\n")
    write(tmp_path, "private/u1.md", "# Review\nThe release bonus of u1 is 900.\n")
    config = knowledge_config(tmp_path, scopes={"docs/private/**": ["user:memory:u1"]})
    llm, channel = FakeLLM(), MemoryChannel()
    async with app_with(config, channel, llm) as app:
        assert isinstance(app.clock, ManualClock)
        app.clock.advance(12 * 3600)  # midday UTC: outside the default quiet hours
        engine = app.feature(ProactiveFeature).engine
        assert engine is not None
        chats = {
            "dm": inbound("ship it", chat="dm-u1"),
            "team": inbound("@iris ship it", chat="team", kind=ChatKind.GROUP, mentioned=True),
        }
        for delay, chat in ((30, "dm"), (200, "team")):  # spaced beyond the 90-minute spacing
            llm.enqueue_tool("proactive_intent", {"what": "ask if the release shipped",
                                                  "delay_minutes": delay})  # fmt: skip
            llm.enqueue_text("noted")
            await app.router.submit(chats[chat])

        found: dict[str, str] = {}
        for wait, chat in ((31, "dm"), (170, "team")):
            app.clock.advance(wait * 60)
            llm.enqueue_tool("documents_search", {"query": "release"})
            llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "it shipped"})
            report = await engine.tick()
            assert report.outcomes == {"skipped": 1}
            gate = llm.requests[-1]
            assert gate.purpose == "proactive_gate"
            assert "documents_search" in {t.name for t in gate.tools}
            result = gate.messages[-1].parts[0]
            assert isinstance(result, ToolResult)
            assert not result.is_error
            found[chat] = result.content

        assert 'path="docs/runbook.md"' in found["dm"]
        assert "bonus of u1 is 900" in found["dm"]  # the user's own document, in their DM
        assert "shipped on Monday" in found["team"]
        assert "900" not in found["team"]
        assert channel.texts() == ["noted", "noted"]  # the two replies; the gate sent nothing
