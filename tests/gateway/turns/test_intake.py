"""Durable intake and resumed turns: saved before the platform is told, replayed after a stop.

Each test runs the real app on a real vault file; "a crash" is an app that stops with a turn
still waiting on the model (the drain deadline cancels it) or a saved row left behind.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.app.app import App
from gateway.app.config import Config
from gateway.core.clock import ManualClock
from gateway.core.errors import VaultError
from gateway.core.llm import LLMRequest, LLMResponse
from gateway.core.messages import ChatRef, Inbound, RejectedInbound
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from vault.db import Vault
from vault.intake import IntakeStore, admit_in
from vault.migrations import MIGRATIONS, migrate
from vault.schema_intake import INTAKE

HOUR_MS = 3_600_000


class StuckLLM:
    """A model that never answers (until the turn is cancelled)."""

    def __init__(self) -> None:
        self.called = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def serve_until(app: App, channel: MemoryChannel, done: asyncio.Event | None = None) -> None:
    """Serve until the channel runs (replay is scheduled before that) and `done` is set, then
    stop; the stop drains the turns in flight."""
    stop = asyncio.Event()
    serving = asyncio.create_task(app.serve(stop))
    await asyncio.wait_for(channel.started.wait(), 5)
    if done is not None:
        await asyncio.wait_for(done.wait(), 5)
    stop.set()
    await asyncio.wait_for(serving, 10)


def cfg(tmp_path: Path, drain_s: float = 10.0) -> Config:
    return make_config(tmp_path, router={"drain_timeout_s": drain_s})


async def test_a_turn_cut_off_by_a_stop_is_answered_once_at_the_next_start(
    tmp_path: Path,
) -> None:
    first, stuck = MemoryChannel(), StuckLLM()
    async with app_with(cfg(tmp_path, drain_s=0), first, stuck) as app:
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(stop))
        await first.started.wait()
        assert first.handler is not None
        (turn,) = await first.handler([inbound("hello", message_id="m1")])
        await asyncio.wait_for(stuck.called.wait(), 5)
        stop.set()
        await serving
        assert turn.cancelled()
    assert first.sent == []

    second, llm = MemoryChannel(), FakeLLM("hi there")
    async with app_with(cfg(tmp_path), second, llm) as app:
        await serve_until(app, second)
        await app.vault.idle()  # the row is forgotten write-behind when the turn ends
        assert await IntakeStore(app.vault).counts() == {}
        rows = await app.vault.fetchall("SELECT role, text FROM messages ORDER BY id")
    assert second.texts() == ["hi there"]
    assert len(llm.requests) == 1
    # Resumed, not recorded a second time; the answer joined the history.
    assert [(r["role"], r["text"]) for r in rows] == [("user", "hello"), ("assistant", "hi there")]


async def test_a_replayed_message_that_was_answered_is_not_answered_again(
    tmp_path: Path,
) -> None:
    channel, llm = MemoryChannel(), FakeLLM("first answer")
    message = inbound("hello", message_id="m1")
    async with app_with(cfg(tmp_path), channel, llm) as app:
        await app.router.submit(message)
        # As if the process died after the reply went out, before the row was finished.
        await IntakeStore(app.vault).admit([message], 0)
    again = MemoryChannel()
    async with app_with(cfg(tmp_path), again, FakeLLM("second answer")) as app:
        await serve_until(app, again)
    assert channel.texts() == ["first answer"]
    assert again.sent == []


async def test_a_saved_message_too_old_to_answer_gets_a_notice(tmp_path: Path) -> None:
    clock = ManualClock()
    old = Inbound(**{**vars_of(inbound("stale question")), "at_ms": clock.now_ms() - 3 * HOUR_MS})
    channel, llm = MemoryChannel(), FakeLLM()
    async with app_with(cfg(tmp_path), channel, llm, clock) as app:
        await IntakeStore(app.vault).admit([old], clock.now_ms())
    again = MemoryChannel()
    async with app_with(cfg(tmp_path), again, llm, clock) as app:
        await serve_until(app, again)
        rows = await app.vault.fetchall("SELECT role, text FROM messages ORDER BY id")
    assert llm.requests == []
    assert len(again.sent) == 1
    assert "too old to answer" in again.sent[0].text
    assert [r["text"] for r in rows if r["role"] == "user"] == ["stale question"]  # saved


async def test_a_late_answer_to_a_replayed_message_says_which_message_it_answers(
    tmp_path: Path,
) -> None:
    clock = ManualClock()  # 2026-01-01 00:00 UTC
    base = vars_of(inbound("x"))
    late = Inbound(
        **{
            **base,
            "text": "did the  deploy\nwork?",
            "message_id": "a",
            "chat": ChatRef(channel="memory", chat_id="c1"),
            "at_ms": clock.now_ms() - 5 * 60_000,
        }
    )
    prompt = Inbound(
        **{
            **base,
            "text": "and now?",
            "message_id": "b",
            "chat": ChatRef(channel="memory", chat_id="c2"),
            "at_ms": clock.now_ms() - 10_000,
        }
    )
    async with app_with(cfg(tmp_path), MemoryChannel(), FakeLLM(), clock) as app:
        await IntakeStore(app.vault).admit([late, prompt], clock.now_ms())
    again, llm = MemoryChannel(), FakeLLM("yes")
    async with app_with(cfg(tmp_path), again, llm, clock) as app:
        await serve_until(app, again)
    replies = {o.chat.chat_id: o.text for o in again.sent}
    # Five minutes late (the user may have moved on): the answer says what it answers.
    assert (
        replies["c1"]
        == "(Answering your message from 2025-12-31 23:55 UTC: “did the deploy work?”)\n\nyes"
    )
    assert replies["c2"] == "yes"  # ten seconds: no note


async def test_turns_keep_arrival_order_per_chat_on_replay(tmp_path: Path) -> None:
    messages = [inbound(f"n{i}", chat="c1", message_id=f"m{i}") for i in range(5)]
    async with app_with(cfg(tmp_path), MemoryChannel(), FakeLLM()) as app:
        await IntakeStore(app.vault).admit(messages, 0)
    channel, llm = MemoryChannel(), FakeLLM()
    for i in range(5):
        llm.enqueue_text(f"re n{i}")
    async with app_with(cfg(tmp_path), channel, llm) as app:
        await serve_until(app, channel)
    assert channel.texts() == [f"re n{i}" for i in range(5)]


async def test_a_vault_that_cannot_write_refuses_the_batch_and_health_says_so(
    config: Config, channel: MemoryChannel, llm: FakeLLM
) -> None:
    async with app_with(config, channel, llm) as app:
        await app.vault.conn.execute("PRAGMA query_only = ON")
        with pytest.raises(VaultError):
            await app.intake([inbound("hello")])
        assert [h.channel for h in app.channel_health() if not h.connected] == ["intake"]
        await app.vault.conn.execute("PRAGMA query_only = OFF")
        (turn,) = await app.intake([inbound("hello again")])
        await turn
        assert app.channel_health() == []
    assert channel.texts() == ["ok"]


async def test_rejected_deliveries_are_kept_with_their_reason_and_never_replayed(
    config: Config, channel: MemoryChannel, llm: FakeLLM
) -> None:
    bad = RejectedInbound(channel="memory", key="memory:update:7", reason="untranslatable")
    async with app_with(config, channel, llm) as app:
        assert await app.intake([bad]) == []
        store = IntakeStore(app.vault)
        assert await store.counts() == {"rejected": 1}
        assert await app.intake.replay() == 0
    assert channel.sent == []


async def test_a_saved_row_this_version_cannot_read_is_rejected_not_an_error(
    config: Config, channel: MemoryChannel, llm: FakeLLM
) -> None:
    async with app_with(config, channel, llm) as app:
        await app.vault.write(
            """INSERT INTO intake (channel, key, chat_key, payload, received_ms)
               VALUES ('memory', 'k1', 'memory:c1', '{"v": 99}', 0),
                      ('memory', 'k2', 'memory:c1', 'not json', 0)"""
        )
        assert await app.intake.replay() == 0
        assert await IntakeStore(app.vault).counts() == {"rejected": 2}


async def test_a_redelivery_of_a_waiting_message_is_absorbed_at_intake(
    config: Config, channel: MemoryChannel, llm: FakeLLM
) -> None:
    message = inbound("hello", message_id="m1")
    async with app_with(config, channel, llm) as app:
        store = IntakeStore(app.vault)
        assert len(await store.admit([message], 0)) == 1
        assert await store.admit([message], 0) == []


def vars_of(message: Inbound) -> dict[str, object]:
    return {name: getattr(message, name) for name in Inbound.__dataclass_fields__}


async def test_a_message_saved_before_a_schema_migration_is_replayed_after_it(
    tmp_path: Path,
) -> None:
    """Saved by a version whose vault had just the intake (the first migrations); the next
    start migrates the vault all the way, then answers the message once."""
    up_to_intake = MIGRATIONS[: MIGRATIONS.index(INTAKE) + 1]
    config = cfg(tmp_path)
    async with Vault(config.settings.vault.path) as vault:
        assert await migrate(vault, up_to_intake) == [m.name for m in up_to_intake]
        await vault.run(lambda raw: admit_in(raw, [inbound("saved long ago", message_id="m1")], 0))
    channel, llm = MemoryChannel(), FakeLLM("answered after the upgrade")
    async with app_with(config, channel, llm) as app:
        assert await app.vault.user_version() == len(MIGRATIONS)
        await serve_until(app, channel)
        await app.vault.idle()
        assert await IntakeStore(app.vault).counts() == {}
    assert channel.texts() == ["answered after the upgrade"]
    (request,) = llm.requests
    assert "saved long ago" in repr(request.messages[-1])  # the model was asked this message
