"""The replicas' heartbeats, on both backends: a beat rewrites its replica's row, readers see
the rows beaten since a moment, counters add up series by series, day-old rows are dropped."""

from __future__ import annotations

from tests.vault.conftest import MakeVault
from vault.migrations import migrate
from vault.replicas import FORGET_MS, Beat, ReplicaStore, total

NOW = 1_767_225_600_000


async def test_beats_rewrite_one_row_per_replica(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        store = ReplicaStore(vault)
        await store.beat(Beat("a", NOW, NOW, ("slack-socket-mode",), {"c": {"x": 1}}))
        await store.beat(Beat("b", NOW, NOW, (), {}))
        await store.beat(Beat("a", NOW, NOW + 10_000, ("telegram-polling",), {"c": {"x": 2}}))
        seen = await store.seen_since(NOW + 5_000)
        assert seen == [Beat("a", NOW, NOW + 10_000, ("telegram-polling",), {"c": {"x": 2}})]
        assert [b.id for b in await store.seen_since(0)] == ["a", "b"]
        await store.beat(Beat("a", NOW, NOW + FORGET_MS + 1, (), {}))  # b is a day gone
        assert [b.id for b in await store.seen_since(0)] == ["a"]


def test_counters_add_up_by_series() -> None:
    summed = total([{"in": {"telegram": 2, "slack": 1}}, {"in": {"telegram": 3}, "out": {"": 4}}])
    assert summed == {"in": {"telegram": 5, "slack": 1}, "out": {"": 4}}


async def test_a_second_process_under_the_same_id_is_noticed_a_restart_is_not(
    make_vault: MakeVault,
) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        store = ReplicaStore(vault)
        # A run that crashed; the restart's first beat has no previous one: nothing to say.
        await store.beat(Beat("a", NOW, NOW, (), {}))
        restarted = NOW + 5_000
        assert await store.beat(Beat("a", restarted, restarted, (), {})) is None
        assert await store.beat(Beat("a", restarted, restarted + 10_000, (), {}), restarted) is None
        assert [b.started_ms for b in await store.seen_since(0)] == [restarted]  # its new start
        # Another process beats under the same id in between: the next beat says when it started.
        twin = NOW + 7_000
        await store.beat(Beat("a", twin, restarted + 15_000, (), {}))
        noticed = await store.beat(
            Beat("a", restarted, restarted + 20_000, (), {}), restarted + 10_000
        )
        assert noticed == twin
