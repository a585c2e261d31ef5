"""The spend store on both backends (`make_vault`), and the budget holds replicas share on
PostgreSQL: a reservation is inserted only when the rule admits it, tallies add up settled
spend and live holds, an expired hold stops counting and is deleted, settling swaps a hold
for its real usage in one transaction, and the over-budget notice is due once across replicas."""

from __future__ import annotations

from pathlib import Path

from tests.fakes import inbound
from tests.vault.conftest import MakeVault
from vault.backend import vault_for
from vault.budget_holds import NewHold, SharedSpendStore, Tallies, Tally, Windows
from vault.conversations import Conversations
from vault.migrations import migrate
from vault.spend import SpendStore, Spent

NOW = 1_700_000_000_000
DAY, MONTH, UTC_DAY = "2023-11-14", "2023-11", "2023-11-14"


async def _user(conversations: Conversations) -> int:
    rec = await conversations.record_inbound(
        inbound("hello", user="u1", chat="c1"), kind="chat", tokens=1, now_ms=NOW
    )
    assert rec is not None
    return rec.user_pk


async def test_spend_adds_up_per_user_day_month_and_everyone(make_vault: MakeVault) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        user = await _user(Conversations(vault))
        store = SpendStore(vault)
        for day, tokens in ((DAY, 100), (DAY, 50), ("2023-11-02", 7), ("2023-10-31", 1_000)):
            store.add_soon(user=(user, day), global_day=day, tokens=tokens, usd_micros=tokens * 2)
        store.refused_soon(user=(user, DAY), global_day=UTC_DAY)
        await vault.idle()
        spend = await store.user(user, DAY)
        assert spend.user_key == "memory:u1"
        assert spend.day == Spent(calls=2, tokens=150, usd_micros=300, refusals=1)
        assert spend.month.usd_micros == 314 and spend.month.calls == 3
        assert await store.everyone(UTC_DAY) == Spent(2, 150, 300, 1)
        assert [r.day for r in await store.recent_days("2023-11-01")] == [DAY, "2023-11-02"]


def _hold(name: str, tokens: int, expires_ms: int) -> NewHold:
    return NewHold(hold=name, owner="r1", tokens=tokens, usd_micros=tokens * 2,
                   expires_ms=expires_ms)  # fmt: skip


async def test_holds_are_reserved_by_the_rule_counted_expired_and_settled(
    pg_url: str, tmp_path: Path
) -> None:
    async with vault_for(tmp_path / "v.db", pg_url) as vault:
        await migrate(vault)
        user = await _user(Conversations(vault))
        store = SharedSpendStore(vault)
        mine = Windows(user, DAY, MONTH, UTC_DAY)
        seen: list[Tallies] = []

        def refuse(t: Tallies) -> bool:
            seen.append(t)
            return False

        tallies, admitted = await store.reserve(mine, _hold("h0", 10, NOW + 1), NOW, refuse)
        assert not admitted and seen == [tallies] and tallies.usd_day == Tally()
        for name, expires in (("h1", NOW + 1_000), ("h2", NOW + 10)):
            _, admitted = await store.reserve(mine, _hold(name, 10, expires), NOW, lambda t: True)
            assert admitted
        store.add_soon(user=(user, DAY), global_day=UTC_DAY, tokens=5, usd_micros=10)
        await vault.idle()
        t = await store.tallies(mine, NOW)
        assert t.tokens_day == Tally(committed=5, reserved=20, in_flight=2)
        assert t.usd_month == Tally(committed=10, reserved=40, in_flight=2)
        assert t.global_day == Tally(committed=10, reserved=40, in_flight=2)
        everyone = await store.tallies(Windows(None, None, None, UTC_DAY), NOW)
        assert everyone.global_day == t.global_day and everyone.usd_day == Tally()
        # h2 has expired by NOW + 10: no longer counted, and the next reservation deletes it
        assert (await store.tallies(mine, NOW + 10)).tokens_day.in_flight == 1
        await store.reserve(mine, _hold("h3", 1, NOW + 20), NOW + 10, lambda t: False)
        holds = await vault.fetchall("SELECT hold FROM budget_holds ORDER BY hold")
        assert [r[0] for r in holds] == ["h1"]
        store.settle_soon("h1", user=(user, DAY), global_day=UTC_DAY, tokens=8, usd_micros=16)
        await vault.idle()
        t = await store.tallies(mine, NOW + 10)
        assert t.tokens_day == Tally(committed=13) and t.global_day == Tally(committed=26)


async def test_a_budget_notice_is_due_once_per_window_across_replicas(
    pg_url: str, tmp_path: Path
) -> None:
    async with (
        vault_for(tmp_path / "a.db", pg_url) as a,
        vault_for(tmp_path / "b.db", pg_url) as b,
    ):
        await migrate(a)
        await migrate(b)
        user = await _user(Conversations(a))
        window = f"user_usd_per_day:{DAY}"
        assert await SharedSpendStore(a).first_notice(user, window, NOW)
        assert not await SharedSpendStore(b).first_notice(user, window, NOW + 1)
        assert await SharedSpendStore(b).first_notice(user, "user_usd_per_day:2023-11-15", NOW)
