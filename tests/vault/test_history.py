"""The recent-history cache (`vault/history.py`) returns exactly what a full read returns."""

from __future__ import annotations

import random
import sqlite3

from tests.fakes import inbound
from tests.vault.conftest import MakeVault
from vault.conversations import Conversations, insert_message
from vault.history import RecentHistory, StoredMessage, Window
from vault.migrations import migrate


def message(n: int, text: str = "x") -> StoredMessage:
    return StoredMessage(id=n, role="user", kind="chat", text=text, tokens=1, at_ms=n)


async def test_incremental_reads_match_a_full_read_through_a_mixed_session(
    make_vault: MakeVault,
) -> None:
    rng = random.Random(7)
    async with make_vault() as vault:
        await migrate(vault)
        cached = Conversations(vault)
        first = await cached.record_inbound(inbound("hello"), kind="chat", tokens=1, now_ms=1)
        assert first is not None
        session, chat_pk = first.session_pk, first.chat_pk
        for n in range(300):
            # Messages written by others too: replies, commands, the proactive engine.
            role, kind = rng.choice(
                [("user", "chat"), ("assistant", "chat"), ("user", "command"),
                 ("assistant", "proactive"), ("assistant", "notice")]
            )  # fmt: skip

            def write(
                raw: sqlite3.Connection, role: str = role, kind: str = kind, n: int = n
            ) -> int:
                return insert_message(
                    raw, session=session, chat=chat_pk, user=None, role=role, kind=kind,
                    text=f"{kind} {n}", tokens=n, now_ms=n,
                )  # fmt: skip

            latest = await vault.run(write)
            if role == "user" and rng.random() < 0.7:  # a turn reads its history
                limit = rng.choice([5, 40])
                got = await cached.history(session, limit=limit, before_id=latest)
                fresh = await Conversations(vault).history(session, limit=limit, before_id=latest)
                assert got == fresh
                assert all(m.id < latest for m in got) and len(got) <= limit
        everything = await cached.history(session, limit=1000)
        assert everything == await Conversations(vault).history(session, limit=1000)
        # Asking for an older window than the one remembered reads it in full.
        older = await cached.history(session, limit=5, before_id=10)
        assert older == await Conversations(vault).history(session, limit=5, before_id=10)


async def test_an_unbounded_read_always_sees_the_latest_messages(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        conversations = Conversations(vault)
        first = await conversations.record_inbound(inbound("a"), kind="chat", tokens=1, now_ms=1)
        assert first is not None
        assert [m.text for m in await conversations.history(first.session_pk, limit=400)] == ["a"]
        for n, text in enumerate(["b", "c"], start=2):
            await conversations.record_inbound(
                inbound(text, message_id=text), kind="chat", tokens=1, now_ms=n
            )
        # What /compact reads: everything up to now, twice in a row.
        for _ in range(2):
            got = await conversations.history(first.session_pk, limit=400)
            assert [m.text for m in got] == ["a", "b", "c"]


def test_a_slower_concurrent_read_does_not_move_the_window_back() -> None:
    recent = RecentHistory()
    recent.put(1, 5, Window(upto=20, messages=(message(19),), chars=1))
    recent.put(1, 5, Window(upto=10, messages=(message(9),), chars=1))
    window = recent.get(1, 5, 30)
    assert window is not None and window.upto == 20
    assert recent.get(1, 5, 15) is None  # a read below the window can't extend it


def test_windows_are_bounded_by_count_and_by_text_size() -> None:
    recent = RecentHistory(capacity=2, max_chars=100)
    for session in range(3):
        recent.put(session, 5, Window(upto=10, messages=(message(1),), chars=1))
    assert recent.get(0, 5, 10) is None and recent.get(2, 5, 10) is not None
    recent.put(3, 5, Window(upto=10, messages=(message(1, "y" * 60),), chars=60))
    recent.put(4, 5, Window(upto=10, messages=(message(1, "z" * 60),), chars=60))
    assert recent.get(3, 5, 10) is None  # over 100 characters: the oldest went
    assert recent.get(4, 5, 10) is not None
