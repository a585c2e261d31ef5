"""Store contracts on both backends (`make_vault`: SQLite and PostgreSQL), for the stores the
backend tests did not cover yet: conversations and memories (ids from `RETURNING`), suggestions
(a block's lifecycle), subscriptions (event sequence numbers), the outbox (order, settling,
leases), proactive intents (registration and the claim) and the periodic slots."""

from __future__ import annotations

from gateway.core.messages import Button, ChatRef, Outbound
from tests.fakes import inbound
from tests.vault.conftest import MakeVault
from vault.conversations import Conversations
from vault.intake import IntakeStore
from vault.intake_claims import IntakeClaims
from vault.memories import Memories
from vault.migrations import migrate
from vault.outbox import Outbox
from vault.periodic import PeriodicRuns
from vault.proactive.store import ProactiveStore
from vault.subscriptions import NewEvent, SubscriptionRow, SubscriptionStore
from vault.suggestions import NewSuggestion, SuggestionStore

NOW = 1_700_000_000_000


async def _chat(conversations: Conversations, user: str = "u1") -> tuple[int, int]:
    rec = await conversations.record_inbound(
        inbound("hello", user=user, chat=f"chat-{user}"), kind="chat", tokens=1, now_ms=NOW
    )
    assert rec is not None
    return rec.user_pk, rec.chat_pk


async def test_conversations_and_memories_return_the_ids_they_drew(
    make_vault: MakeVault,
) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        conversations, memories = Conversations(vault), Memories(vault)
        user, chat = await _chat(conversations)
        first = await conversations.restart_session(chat, summary="s1", now_ms=NOW + 1)
        second = await conversations.restart_session(chat, summary="s2", now_ms=NOW + 2)
        assert second > first > 0
        open_ = await vault.scalar(
            "SELECT id FROM sessions WHERE chat = ? AND ended_ms IS NULL", (chat,)
        )
        assert open_ == second
        ids = [await memories.remember(user, f"fact {n}", NOW) for n in range(3)]
        assert ids == sorted(ids) and len(set(ids)) == 3
        texts = await vault.fetchall("SELECT id, text FROM memories ORDER BY id")
        assert [(r[0], r[1]) for r in texts] == [(i, f"fact {n}") for n, i in enumerate(ids)]
        assert await memories.forget(user, ids[0])
        assert await memories.forget_all(user) == 2  # `/forget all`: the rest, counted
        assert await memories.count(user) == 0 and await memories.search(user, "fact", 5) == []


async def test_a_suggestion_block_is_written_shown_and_decided(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        user, chat = await _chat(Conversations(vault))
        store = SuggestionStore(vault)
        items = [
            NewSuggestion(
                item_key=f"doc:{n}",
                type="doc",
                title=f"T{n}",
                summary="s",
                content="c",
                relevance=0.9 - n / 10,
                reason="r",
            )
            for n in range(3)
        ]
        ids = await store.add_block(chat=chat, user=user, items=items, now_ms=NOW)
        assert len(ids) == 3 and ids == sorted(ids)
        await store.mark_shown(ids, NOW + 1)
        block = await store.latest_block(chat)
        assert [s.id for s in block] == ids
        assert await store.decide(ids[1], chat, "used", NOW + 2)
        assert not await store.decide(ids[1], chat, "dismissed", NOW + 3)  # decided already
        [used] = await store.take_used(chat, NOW + 4)
        assert used.id == ids[1]
        assert await store.take_used(chat, NOW + 5) == []  # given to the model once


async def test_subscription_events_get_increasing_sequence_numbers(
    make_vault: MakeVault,
) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        store = SubscriptionStore(vault)
        await store.create(
            SubscriptionRow(
                id="sub1",
                owner="admin",
                patterns=[{"topic": "deploy"}],
                callback="poll",
                url=None,
                secret=None,
                min_relevance=0.5,
                max_per_trigger=3,
                cooldown_ms=0,
                chats=[],
                users=[],
                enabled=True,
                disabled_reason=None,
                failures=0,
                last_triggered_ms=None,
                created_ms=NOW,
            )
        )
        events = [NewEvent(id=f"e{n}", chat="c", payload={"n": n}) for n in range(3)]
        seqs = await store.add_events("sub1", events, webhook=False, now_ms=NOW)
        assert seqs == sorted(seqs) and len(set(seqs)) == 3
        assert await store.last_seq("sub1") == seqs[-1]
        listed = await store.events_since("sub1", seqs[0], 10)
        assert [(e.seq, e.id, e.payload) for e in listed] == [
            (seqs[1], "e1", {"n": 1}),
            (seqs[2], "e2", {"n": 2}),
        ]


async def test_the_outbox_keeps_chat_order_and_settles_interrupted_sends(
    make_vault: MakeVault,
) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        outbox = Outbox(vault)
        chat = ChatRef(channel="memory", chat_id="c1")

        def out(key: str) -> Outbound:
            return Outbound(chat=chat, text=key, idempotency_key=key)

        first, waits = await outbox.enqueue_in_order(out("a"), NOW)
        assert (first.status, waits) == ("sending", False)
        second, waits = await outbox.enqueue_in_order(out("b"), NOW)
        assert (second.status, waits) == ("pending", True)
        again, _ = await outbox.enqueue_in_order(out("a"), NOW)
        assert not again.created and again.id == first.id
        assert await outbox.first_waiting() == []  # "b" waits behind the send of "a"
        assert await outbox.recover_after_crash(NOW) == 1  # "a" may have gone out
        [waiting] = await outbox.first_waiting()
        assert waiting.row.id == second.id
        assert await outbox.mark_sending(second.id, NOW)
        await outbox.mark_sent(second.id, ["p1"], NOW)
        assert await outbox.counts() == {"uncertain": 1, "sent": 1}


async def test_a_queued_message_keeps_its_buttons_for_the_resend(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        outbox = Outbox(vault)
        rows = (
            (
                Button(label="Use 1", payload="/use #7"),
                Button(label="Dismiss 1", payload="/dismiss #7"),
            ),
        )
        chat = ChatRef(channel="memory", chat_id="c1")
        plain = Outbound(chat=chat, text="plain", idempotency_key="k0")
        tip = Outbound(chat=chat, text="Possibly useful", idempotency_key="k1", buttons=rows)
        for out in (plain, tip):
            await outbox.enqueue(out, NOW)
        assert [r.outbound for r in await outbox.due(NOW)] == [plain, tip]


async def test_leased_outbox_rows_belong_to_their_replica(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        mine = Outbox(vault, owner="a", lease_ms=1000)
        theirs = Outbox(vault, owner="b", lease_ms=1000)
        chat = ChatRef(channel="memory", chat_id="c1")
        row = await mine.enqueue(Outbound(chat=chat, text="x", idempotency_key="k"), NOW)
        assert not await theirs.mark_sending(row.id, NOW + 1)
        assert await mine.renew(NOW + 500) == 1
        assert not await theirs.mark_sending(row.id, NOW + 1499)
        assert await theirs.mark_sending(row.id, NOW + 1500)  # the lease ran out
        assert await theirs.recover_after_crash(NOW + 1501, at_start=False) == 0  # its own


async def test_proactive_intents_are_claimed_once(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        user, chat = await _chat(Conversations(vault))
        store = ProactiveStore(vault)
        ids = [
            await store.add_intent(
                chat=chat,
                user=user,
                what=f"w{n}",
                why="y",
                confidence=0.8,
                kind="ai",
                exact_time=False,
                execute_at=NOW + n,
                now_ms=NOW,
            )
            for n in range(3)
        ]
        assert ids == sorted(ids) and len(set(ids)) == 3
        claimed = await store.claim(now_ms=NOW + 10, lease_ms=1000, limit=2, token="t1")
        assert [i.id for i in claimed] == ids[:2]
        rest = await store.claim(now_ms=NOW + 10, lease_ms=1000, limit=5, token="t2")
        assert [i.id for i in rest] == ids[2:]
        assert await store.claim(now_ms=NOW + 10, lease_ms=1000, limit=5, token="t3") == []


async def test_a_periodic_slot_is_won_once(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        a, b = PeriodicRuns(vault, "a"), PeriodicRuns(vault, "b")
        assert await a.claim("scan", 100, NOW)
        assert not await b.claim("scan", 100, NOW)
        assert await b.claim("scan", 200, NOW)
        assert await b.claim("other", 100, NOW)
        assert (await a.runner("scan", 100), await a.runner("scan", 200)) == ("a", "b")


async def test_a_memory_saved_by_another_replica_is_seen_within_the_ttl(
    make_vault: MakeVault, backend: str
) -> None:
    from vault.memories import SHARED_NONE_TTL_S

    now = [100.0]
    async with make_vault() as vault:
        await migrate(vault)
        user, _ = await _chat(Conversations(vault))
        here = Memories(vault, clock=lambda: now[0])  # this replica's store
        there = Memories(vault)  # another replica's, on the same vault
        assert not await here.has_any(user)
        await there.remember(user, "the staging cluster is eu-west", NOW)
        assert not await here.has_any(user)  # believed for a moment
        now[0] += SHARED_NONE_TTL_S
        shared = backend == "postgresql"
        assert await here.has_any(user) is shared  # SQLite: this process is the only writer
        found = await here.search(user, "staging cluster")
        assert [m.text for m in found] == (["the staging cluster is eu-west"] if shared else [])


async def test_a_process_reads_back_only_the_work_of_the_channels_it_runs(
    make_vault: MakeVault,
) -> None:
    """`iris chat` beside `iris run` (or a replica running other platforms): the outbox
    resend, crash recovery, intake replay, intake chat claims and the proactive claim each
    filter in the query, so a limit counts only what this process could do."""
    async with make_vault() as vault:
        await migrate(vault)
        conversations = Conversations(vault)
        outbox, store = Outbox(vault), IntakeStore(vault)
        for channel in ("console", "telegram"):
            chat = ChatRef(channel=channel, chat_id="c1")
            await outbox.enqueue(Outbound(chat=chat, text=channel, idempotency_key=channel), NOW)
            await store.admit([inbound("hi", channel=channel, message_id=channel)], NOW)
        assert [w.row.outbound.text for w in await outbox.first_waiting(channels=["telegram"])] \
            == ["telegram"]  # fmt: skip
        assert await outbox.first_waiting(channels=[]) == []
        pending, _ = await store.pending(["console"])
        assert [p.inbound.chat.channel for p in pending] == ["console"]
        claims = IntakeClaims(vault)
        found = await claims.claimable(replica="r", now_ms=NOW, limit=1, channels=["telegram"])
        assert found == ["telegram:c1"]  # the console chat is older: filtered before the limit
        assert await claims.claimable(replica="r", now_ms=NOW, channels=[]) == []

        user, chat_pk = await _chat(conversations)  # a chat on the "memory" channel
        args = {"chat": chat_pk, "user": user, "what": "w", "why": "y", "confidence": 0.8,
                "kind": "ai", "exact_time": False, "execute_at": NOW, "now_ms": NOW}  # fmt: skip
        intent = await ProactiveStore(vault).add_intent(**args)  # type: ignore[arg-type]
        elsewhere = ProactiveStore(vault, served=["console", "telegram"])
        assert await elsewhere.next_due_ms() is None
        assert await elsewhere.claim(now_ms=NOW, lease_ms=1000, limit=5, token="t") == []
        served = ProactiveStore(vault, served=["memory"])
        assert await served.next_due_ms() == NOW
        assert [i.id for i in await served.claim(now_ms=NOW, lease_ms=1000, limit=5,
                                                 token="t")] == [intent]  # fmt: skip
