"""The operators' figures (`vault/reports.py`, `AnalyzerStore.totals`) over rows written by
the real stores: the user list, message counts per channel and role, the file size, and the
analyzer's suggestion totals."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.core.messages import UserRef
from tests.fakes import inbound
from tests.vault.conftest import MakeVault
from vault.analyzer import AnalyzerStore, Event, EventKind
from vault.backend import vault_for
from vault.conversations import Conversations
from vault.db import Vault
from vault.migrations import migrate
from vault.reports import MessageCount, Reports


@pytest.fixture
async def vault(make_vault: MakeVault) -> AsyncIterator[Vault]:
    async with make_vault() as opened:
        await migrate(opened)
        yield opened


async def test_users_come_most_recently_seen_first_with_zone_and_settings(vault: Vault) -> None:
    conversations = Conversations(vault)
    ann = inbound("hi", user="ann", channel="telegram")
    ann = replace(ann, user=UserRef(channel="telegram", user_id="ann", display_name="Ann"))
    first = await conversations.record_inbound(ann, kind="chat", tokens=1, now_ms=1_000)
    second = await conversations.record_inbound(
        inbound("yo", user="bob", channel="slack"), kind="chat", tokens=1, now_ms=2_000
    )
    await conversations.record_inbound(
        inbound("hey", user="cy"), kind="chat", tokens=1, now_ms=3_000
    )
    assert first is not None and second is not None
    await conversations.set_timezone(first.user_pk, "Europe/Paris")
    await conversations.update_settings(second.user_pk, {"proactive_enabled": False})
    # Ann writes again, later than everyone: she moves to the top.
    await conversations.record_inbound(
        replace(ann, message_id="again"), kind="chat", tokens=1, now_ms=4_000
    )

    users = await Reports(vault).users(limit=100)

    assert [(u.channel, u.user_id, u.last_seen_ms) for u in users] == [
        ("telegram", "ann", 4_000),
        ("memory", "cy", 3_000),
        ("slack", "bob", 2_000),
    ]
    ann_row, _, bob_row = users
    assert (ann_row.display_name, ann_row.timezone, ann_row.settings) == ("Ann", "Europe/Paris", {})
    assert ann_row.first_seen_ms == 1_000 and ann_row.pk == first.user_pk
    assert (bob_row.display_name, bob_row.timezone) == ("", None)
    assert bob_row.settings == {"proactive_enabled": False}
    assert [u.user_id for u in await Reports(vault).users(limit=2)] == ["ann", "cy"]


async def test_message_counts_by_channel_and_role_since_a_time(vault: Vault) -> None:
    conversations = Conversations(vault)

    async def exchange(channel: str, chat: str, at_ms: int, replies: int) -> None:
        rec = await conversations.record_inbound(
            inbound("q", chat=chat, channel=channel), kind="chat", tokens=1, now_ms=at_ms
        )
        assert rec is not None
        for n in range(replies):
            await conversations.record_reply(
                session=rec.session_pk, chat=rec.chat_pk, kind="chat", text="a", tokens=1,
                now_ms=at_ms + n,
            )  # fmt: skip

    await exchange("slack", "s1", 100, replies=1)  # before the window
    await exchange("telegram", "t1", 1_000, replies=2)
    await exchange("telegram", "t2", 1_500, replies=0)
    await exchange("slack", "s1", 2_000, replies=3)
    await exchange("memory", "m1", 3_000, replies=1)

    counts = await Reports(vault).message_counts(since_ms=1_000)

    assert counts == [
        MessageCount("memory", "assistant", 1),
        MessageCount("memory", "user", 1),
        MessageCount("slack", "assistant", 3),
        MessageCount("slack", "user", 1),
        MessageCount("telegram", "assistant", 2),
        MessageCount("telegram", "user", 2),
    ]
    assert await Reports(vault).message_counts(since_ms=0) == [
        MessageCount("memory", "assistant", 1),
        MessageCount("memory", "user", 1),
        MessageCount("slack", "assistant", 4),
        MessageCount("slack", "user", 2),
        MessageCount("telegram", "assistant", 2),
        MessageCount("telegram", "user", 2),
    ]
    assert await Reports(vault).message_counts(since_ms=10_000) == []


async def test_vault_bytes_is_the_pages_in_use(tmp_path: Path) -> None:
    async with Vault(tmp_path / "bytes.db") as vault:
        await migrate(vault)
        await _pages_in_use(vault)


async def test_vault_bytes_on_postgresql_is_the_database_size(pg_url: str) -> None:
    async with vault_for(Path("unused"), pg_url) as vault:
        await migrate(vault)
        size = await Reports(vault).vault_bytes()
        assert size > 0
        assert size == await vault.scalar("SELECT pg_database_size(current_database())")


async def _pages_in_use(vault: Vault) -> None:
    page_size = int(await vault.scalar("PRAGMA page_size"))
    before = await Reports(vault).vault_bytes()
    assert before == int(await vault.scalar("PRAGMA page_count")) * page_size
    assert before > 0 and before % page_size == 0
    conversations = Conversations(vault)
    rec = await conversations.record_inbound(inbound("x"), kind="chat", tokens=1, now_ms=1)
    assert rec is not None
    for n in range(200):
        await conversations.record_reply(
            session=rec.session_pk, chat=rec.chat_pk, kind="chat", text="y" * 2_000, tokens=1,
            now_ms=n,
        )  # fmt: skip
    after = await Reports(vault).vault_bytes()
    assert after == int(await vault.scalar("PRAGMA page_count")) * page_size
    assert after >= before + 200 * 2_000


async def test_analyzer_totals_count_every_event_ever_by_event_and_command(vault: Vault) -> None:
    conversations = Conversations(vault)
    rec = await conversations.record_inbound(inbound("x"), kind="chat", tokens=1, now_ms=1)
    assert rec is not None
    store = AnalyzerStore(vault)
    assert await store.totals() == {}
    events: list[tuple[EventKind, str]] = (
        [("shown", "clear")] * 3 + [("shown", "compact")] * 2 + [("followed", "clear")]
    )
    for at_ms, (kind, command) in enumerate(events):
        store.save(
            rec.session_pk, {}, now_ms=at_ms,
            event=Event(kind=kind, command=command, chat=rec.chat_pk),
        )  # fmt: skip
    await vault.idle()

    assert await store.totals() == {
        ("followed", "clear"): 1,
        ("shown", "clear"): 3,
        ("shown", "compact"): 2,
    }
    # The windowed counts agree for a window that covers everything.
    assert (await store.counts(0)).shown == 5
