"""Crashes: the engine cancelled at every step boundary (then restarted), and a real process
killed with SIGKILL mid-send. Every item must end in exactly one terminal state, nothing may
be sent twice, and a send whose outcome is unknown must end `uncertain`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.core.errors import VaultError
from tests.fakes import MemoryChannel
from tests.proactive.support import BlockingChannel, FileChannel, Locks, harness
from vault.proactive.store import Item

STEPS = ["claimed", "policy", "gated", "delivering", "mid-send", "sent"]
EXPECTED_FIRST = {
    "claimed": "sent",
    "policy": "sent",  # nothing was written: the item simply runs again
    "gated": "sent",
    "delivering": "sent",  # outbox row written, never attempted: sent once after take-over
    "mid-send": "uncertain",  # may have reached the user: never resent
    "sent": "sent",  # delivered, not yet recorded: finished from the outbox row
}


@pytest.mark.anyio
@pytest.mark.parametrize("recover", [False, True], ids=["same-process", "with-recovery"])
@pytest.mark.parametrize("step", STEPS)
async def test_cancel_at_every_step_then_restart(tmp_path: Path, step: str, recover: bool) -> None:
    channel = BlockingChannel() if step == "mid-send" else MemoryChannel()
    # One item at a time, so only the first is in flight when the run stops (the concurrent
    # case is covered below).
    async with harness(tmp_path, channel=channel, concurrency=1) as h:
        h.auto_send = "hello"
        ids = []
        for n in range(3):
            u, c = await h.user(f"u{n}")
            ids.append(await h.intent(u, c))
        stuck = asyncio.Event()

        async def probe(name: str, item: Item) -> None:
            if name == step and item.id == ids[0]:
                stuck.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(h.engine("first", probe=probe).tick())
        entered = channel.entered if isinstance(channel, BlockingChannel) else stuck
        await entered.wait()
        task.cancel()
        await asyncio.wait([task])
        if isinstance(channel, BlockingChannel):
            channel.release.set()  # the restarted process has a working channel
        if recover:
            await h.delivery.recover()  # what App startup does
        h.clock.advance(h.config.lease_ms / 1000 + 1)
        restarted = h.engine("second")
        await restarted.tick()
        await restarted.tick()
        statuses = [await h.status(i) for i in ids]
        assert statuses == [EXPECTED_FIRST[step], "sent", "sent"]
        keys = [o.idempotency_key for o in channel.sent]
        assert len(keys) == len(set(keys))
        first_key = f"proactive:intent:{ids[0]}"
        assert (first_key in keys) is (EXPECTED_FIRST[step] == "sent")
        logged = await h.vault.fetchall("SELECT source_id, status FROM proactive_log")
        assert sorted(tuple(r) for r in logged) == sorted(zip(ids, statuses, strict=True))


CHILD = Path(__file__).with_name("proactive_child.py")


@pytest.mark.slow
async def test_sigkill_mid_tick_then_restart(tmp_path: Path) -> None:
    db, sends = tmp_path / "p.db", tmp_path / "sends.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(db), str(sends),
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )  # fmt: skip
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    assert line.strip() == b"SENDING", line
    os.kill(proc.pid, signal.SIGKILL)
    assert await proc.wait() == -signal.SIGKILL
    before = sends.read_text().split()
    assert len(before) == 3  # two delivered, the third reached the platform, then the kill
    async with harness(tmp_path, channel=FileChannel(sends), start="2026-01-10T13:00:00") as h:
        h.auto_send = "hello"
        await h.delivery.recover()
        await h.engine("restarted").tick()
        statuses = await h.store.counts("intent")
        assert statuses == {"sent": 4, "uncertain": 1}
        after = sends.read_text().split()
        assert len(after) == len(set(after)) == 5
        assert after[:3] == before


class _FailingRenewals:
    """The engine's store, but renewing a lease fails."""

    def __init__(self, store: object) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def renew(self, *args: object) -> None:
        raise VaultError("database is locked")


async def test_a_hung_run_whose_lease_expired_cannot_send_after_the_take_over(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as h:
        h.auto_send = "hello"
        user, chat = await h.user("u1")
        intent = await h.intent(user, chat)
        hung, release = asyncio.Event(), asyncio.Event()

        async def probe(name: str, item: Item) -> None:
            if name == "gated":
                hung.set()
                await release.wait()

        slow_engine = h.engine("slow", probe=probe)
        # A live run renews its leases; this one's renewals fail (a stalled vault, a blocked
        # loop), so its lease runs out while it still means to send.
        slow_engine.store = _FailingRenewals(h.store)  # type: ignore[assignment]
        slow = asyncio.create_task(slow_engine.tick())
        await hung.wait()
        h.clock.advance(h.config.lease_ms / 1000 + 1)
        # Another process: its own chat locks (the hung run holds this one's).
        report = await h.engine("fast", locks=Locks()).tick()
        assert report.outcomes == {"sent": 1}
        release.set()
        late = await slow
        assert late.outcomes == {"lost": 1}
        assert len(h.channel.sent) == 1
        assert await h.status(intent) == "sent"
        assert await h.vault.scalar("SELECT count(*) FROM outbox") == 1
