"""A long reply cut short by a rate limit, then a restart: the new process sends the rest only.

The real Slack channel against the loopback Web API, real delivery and outbox on a vault, a
manual clock: the first chunk goes out, the second gets a 429 with a long Retry-After (the row
waits for the background resend), and a fresh channel and delivery (nothing in memory, as after
a restart) send chunks two and three, each once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from channels.slack.events import reply_chunks
from gateway.core.clock import ManualClock
from gateway.core.messages import ChatRef, Outbound
from gateway.turns.delivery import Delivery
from tests.channels.slack.test_channel import make_channel
from tests.fakes.slack import FakeSlackAPI, running_fake_slack
from vault.db import Vault
from vault.migrations import migrate
from vault.outbox import Outbox


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackAPI]:
    async with running_fake_slack() as api:
        yield api


async def test_after_a_restart_only_the_chunks_not_yet_sent_go_out(
    tmp_path: Path, fake: FakeSlackAPI
) -> None:
    text = "\n\n".join(f"Part {i}: " + "word " * 380 for i in range(5))
    chunks = reply_chunks(text)
    assert len(chunks) >= 3
    fake.rate_limit(1, retry_after="600", after=1)  # the second post waits ten minutes
    clock = ManualClock()
    async with Vault(tmp_path / "v.db") as vault:
        await migrate(vault)
        outbox = Outbox(vault)
        before = Delivery(outbox=outbox, channels={"slack": make_channel(fake)}, clock=clock)
        reply = Outbound(chat=ChatRef(channel="slack", chat_id="D1"), text=text,
                         idempotency_key="reply-1")  # fmt: skip
        result = await before.deliver(reply)
        assert result.status == "queued"
        assert [p["text"] for p in fake.posts] == chunks[:1]
        # A restart: a new channel and delivery, with nothing of the attempt in memory.
        clock.advance(601)
        after = Delivery(outbox=outbox, channels={"slack": make_channel(fake)}, clock=clock)
        await after.recover()
        assert await outbox.status(result.outbox_id) == "sent"
    assert [p["text"] for p in fake.posts] == chunks  # each chunk once, in order
