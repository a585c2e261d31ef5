"""Short, renewed leases: a run that is alive keeps its items however long a send takes; the
items of a run that died are picked up one short lease later; a send that may have happened
stays uncertain, never resent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from proactive.engine import EngineConfig
from proactive.settings import ProactiveSection
from tests.proactive.support import BlockingChannel, harness
from vault.proactive.store import Item, ProactiveStore

LEASE_MS = 60_000


class SignallingStore(ProactiveStore):
    """The real store; each committed renewal is put on `renewals` (how many rows)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.renewals: asyncio.Queue[int] = asyncio.Queue()

    async def renew(self, items: list[Item], token: str, lease_until: int) -> int:
        renewed = await super().renew(items, token, lease_until)
        self.renewals.put_nowait(renewed)
        return renewed


def test_the_default_lease_is_a_minute() -> None:
    assert EngineConfig.from_section(ProactiveSection()).lease_ms == LEASE_MS
    assert EngineConfig().lease_ms == LEASE_MS


async def test_a_live_run_renews_its_lease_and_keeps_its_item(tmp_path: Path) -> None:
    channel = BlockingChannel()
    async with harness(tmp_path, channel=channel, lease_ms=LEASE_MS) as h:
        store = h.store = SignallingStore(h.vault)
        h.auto_send = "hello"
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        first = asyncio.create_task(h.engine("first").tick())
        await asyncio.wait_for(channel.entered.wait(), 5)  # the send is under way, and slow
        for _ in range(9):  # three whole leases
            h.clock.advance(LEASE_MS / 3000)
            assert await asyncio.wait_for(store.renewals.get(), 5) == 1
            row = await h.row(intent)
            assert row["lease_until"] == h.clock.now_ms() + LEASE_MS
            # Another run finds the item held: it takes nothing over and sends nothing.
            report = await h.engine("other").tick()
            assert (report.reconciled, report.claimed) == (0, 0)
        channel.release.set()
        assert (await asyncio.wait_for(first, 5)).outcomes == {"sent": 1}
        assert [o.idempotency_key for o in channel.sent] == [f"proactive:intent:{intent}"]
        row = await h.row(intent)
        assert (row["status"], row["lease_until"]) == ("sent", None)
        # The tick is over: nothing renews any more.
        h.clock.advance(LEASE_MS / 1000)
        assert store.renewals.empty()


async def test_a_dead_runs_claimed_item_is_picked_up_after_one_short_lease(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, lease_ms=LEASE_MS) as h:
        h.auto_send = "hello"
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        now = h.clock.now_ms()
        # A run claimed it and died before doing anything (no renewal ever comes).
        (held,) = await h.store.claim(now_ms=now, lease_ms=LEASE_MS, limit=5, token="dead:1:1")
        assert held.id == intent
        h.clock.advance(LEASE_MS / 1000 - 1)
        assert (await h.engine("restarted").tick()).claimed == 0  # still leased
        h.clock.advance(1)
        report = await h.engine("restarted").tick()
        assert (report.claimed, report.outcomes) == (1, {"sent": 1})
        assert h.channel.texts() == ["hello"]


async def test_a_dead_runs_send_stays_uncertain_and_is_never_resent(tmp_path: Path) -> None:
    channel = BlockingChannel()
    async with harness(tmp_path, channel=channel, lease_ms=LEASE_MS) as h:
        h.auto_send = "hello"
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        first = asyncio.create_task(h.engine("first").tick())
        await asyncio.wait_for(channel.entered.wait(), 5)
        first.cancel()  # the run dies mid-send
        await asyncio.wait([first])
        await h.vault.idle()
        assert await h.status(intent) == "delivering"
        channel.release.set()  # the platform would accept anything now
        h.clock.advance(LEASE_MS / 1000 + 1)
        restarted = h.engine("restarted")
        assert (await restarted.tick()).reconciled == 1
        await restarted.tick()
        assert await h.status(intent) == "uncertain"
        assert channel.sent == []  # never sent a second time
        status = await h.vault.scalar("SELECT status FROM proactive_log WHERE source_id = ?",
                                      (intent,))  # fmt: skip
        assert status == "uncertain"
