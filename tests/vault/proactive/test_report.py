"""The simulator report's reads (`vault/proactive/report.py`) and the admin's user time zone,
over intents and triggers taken through their lifecycle by the real store: claimed, deferred,
delivering, sent, skipped, failed, cancelled, and left claimed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.core.messages import Outbound, OutboundKind
from tests.fakes import inbound
from vault.conversations import Conversations
from vault.db import Vault
from vault.migrations import migrate
from vault.proactive.admin import ProactiveAdminQueries
from vault.proactive.report import ProactiveReport, ReportItem
from vault.proactive.store import Item, ItemStatus, ProactiveStore


@pytest.fixture
async def vault(tmp_path: Path) -> AsyncIterator[Vault]:
    async with Vault(tmp_path / "report.db") as opened:
        await migrate(opened)
        yield opened


async def _user(vault: Vault, name: str) -> tuple[int, int]:
    rec = await Conversations(vault).record_inbound(
        inbound("hi", user=name, chat=f"chat-{name}"), kind="chat", tokens=1, now_ms=1
    )
    assert rec is not None
    return rec.user_pk, rec.chat_pk


def _out(item: Item) -> Outbound:
    return Outbound(chat=item.chat, text="How did it go?", kind=OutboundKind.PROACTIVE,
                    idempotency_key=f"proactive:{item.source}:{item.id}")  # fmt: skip


async def test_items_counts_deferrals_and_unfinished_rows(vault: Vault) -> None:
    conversations = Conversations(vault)
    store = ProactiveStore(vault)
    ann, ann_chat = await _user(vault, "ann")
    bob, bob_chat = await _user(vault, "bob")
    await conversations.set_timezone(ann, "Europe/Paris")
    await conversations.update_settings(bob, {"proactive_enabled": False})

    async def intent(user: int, chat: int, *, at: int = 100, reminder: bool = False) -> int:
        return await store.add_intent(
            chat=chat, user=user, what="check in", why="said so", confidence=0.9,
            kind="user_reminder" if reminder else "ai", exact_time=reminder, execute_at=at,
            now_ms=50,
        )  # fmt: skip

    async def trigger(type: str, user: int, chat: int) -> int:
        found = await store.add_trigger(
            type=type, chat=chat, user=user, context="quiet", source_key=f"{type}:{user}",
            execute_at=100, now_ms=50,
        )  # fmt: skip
        assert found is not None
        return found

    deferred = await intent(ann, ann_chat)
    reminder = await intent(ann, ann_chat, reminder=True)
    skipped = await intent(bob, bob_chat)
    later = await intent(bob, bob_chat, at=10_000)  # not due: never claimed
    cancelled = await intent(ann, ann_chat)
    moved = await intent(ann, ann_chat)  # rescheduled, but not a deferral
    dormant = await trigger("dormant_user", ann, ann_chat)
    unanswered = await trigger("unanswered", bob, bob_chat)
    external = await trigger("external", bob, bob_chat)
    assert await store.cancel_intent(ann, cancelled, 60)

    claimed = {
        (i.source, i.id): i
        for i in await store.claim(now_ms=1_000, lease_ms=60_000, limit=10, token="t")
    }
    assert set(claimed) == {("intent", deferred), ("intent", reminder), ("intent", skipped),
                            ("intent", moved), ("trigger", dormant), ("trigger", unanswered),
                            ("trigger", external)}  # fmt: skip
    assert await store.reschedule(claimed["intent", deferred], 5_000, "quiet hours")
    assert await store.reschedule(claimed["intent", moved], 5_000, "later", deferral=False)
    assert await store.begin_delivery(
        claimed["intent", reminder], _out(claimed["intent", reminder]), 1_100, None
    )
    assert await store.finish(claimed["intent", skipped], ItemStatus.SKIPPED, "gate", 1_100)
    sent = claimed["trigger", dormant]
    assert await store.begin_delivery(sent, _out(sent), 1_100, None)
    assert await store.complete_delivery(sent, ItemStatus.SENT, "sent", "How did it go?", 1_200)
    assert await store.finish(claimed["trigger", external], ItemStatus.FAILED, "no chat", 1_100)
    # The unanswered trigger stays claimed and pending: its run never finished.
    # The deferred intent comes round again and is put off a second time: still one intent.
    again = await store.claim(now_ms=6_000, lease_ms=60_000, limit=10, token="t2")
    assert [(i.id, i.deferrals) for i in again if i.id == deferred] == [(deferred, 1)]
    for item in again:
        assert await store.reschedule(item, 20_000, "quiet hours", deferral=item.id == deferred)

    report = ProactiveReport(vault)

    assert await report.counts("intent", "status") == {
        "cancelled": 1, "delivering": 1, "pending": 3, "skipped": 1,
    }  # fmt: skip
    assert list(await report.counts("intent", "status")) == [
        "cancelled", "delivering", "pending", "skipped",
    ]  # fmt: skip
    assert await report.counts("intent", "kind") == {"ai": 5, "user_reminder": 1}
    assert list((await report.counts("trigger", "kind")).items()) == [
        ("dormant_user", 1), ("external", 1), ("unanswered", 1),
    ]  # fmt: skip
    assert list((await report.counts("trigger", "status")).items()) == [
        ("failed", 1), ("pending", 1), ("sent", 1),
    ]  # fmt: skip
    assert await report.deferred_intents() == 1
    assert await report.unfinished() == 2  # the delivering reminder, the claimed trigger

    items = {(i.source, i.id): i for i in await report.items()}
    assert len(items) == 9
    assert items["intent", reminder] == ReportItem(
        source="intent", id=reminder, user_pk=ann, kind="user_reminder", exact_time=True,
        timezone="Europe/Paris", settings={},
    )  # fmt: skip
    assert items["intent", later] == ReportItem(
        source="intent", id=later, user_pk=bob, kind="ai", exact_time=False, timezone=None,
        settings={"proactive_enabled": False},
    )  # fmt: skip
    assert items["trigger", unanswered] == ReportItem(
        source="trigger", id=unanswered, user_pk=bob, kind="unanswered", exact_time=False,
        timezone=None, settings={"proactive_enabled": False},
    )  # fmt: skip
    assert sorted(i.kind for i in items.values() if i.source == "trigger") == [
        "dormant_user", "external", "unanswered",
    ]  # fmt: skip


async def test_an_empty_vault_reports_nothing(vault: Vault) -> None:
    report = ProactiveReport(vault)
    assert await report.items() == []
    assert await report.counts("intent", "status") == {}
    assert await report.counts("trigger", "kind") == {}
    assert (await report.deferred_intents(), await report.unfinished()) == (0, 0)


async def test_user_timezone_for_the_quota(vault: Vault) -> None:
    ann, _ = await _user(vault, "ann")
    bob, _ = await _user(vault, "bob")
    await Conversations(vault).set_timezone(ann, "America/Denver")
    queries = ProactiveAdminQueries(vault)
    assert await queries.user_timezone(ann) == "America/Denver"
    assert await queries.user_timezone(bob) is None
    assert await queries.user_timezone(bob + 100) is None
