"""The pairing store: one live code per user, codes expire, a decision spends the code."""

from __future__ import annotations

from tests.vault.conftest import MakeVault
from vault.migrations import migrate
from vault.pairing import (
    CODE_ALPHABET,
    Access,
    AccessStore,
    looks_like_code,
    normalize_code,
)


async def test_codes_are_reused_expire_and_are_spent_by_a_decision(
    make_vault: MakeVault,
) -> None:
    async with make_vault() as vault:
        await migrate(vault)
        store = AccessStore(vault, code_ttl_ms=1000)
        first = await store.code_for("telegram", "42", "Ann", now_ms=0)
        assert len(first) == 6 and set(first) <= set(CODE_ALPHABET)
        assert await store.code_for("telegram", "42", "Ann", now_ms=999) == first
        other = await store.code_for("slack", "U1", "", now_ms=10)
        assert other != first
        found = await store.find_code(f"{first[:3].lower()}-{first[3:]}", now_ms=500)
        assert found is not None and found.key == "telegram:42" and found.display_name == "Ann"
        assert await store.find_code(first, now_ms=1000) is None  # expired
        renewed = await store.code_for("telegram", "42", "Ann", now_ms=1000)
        assert [p.key for p in await store.pending(1000)] == ["telegram:42", "slack:U1"]
        await store.decide("telegram", "42", Access.ALLOW, actor="slack:B", now_ms=1001)
        assert await store.find_code(renewed, now_ms=1001) is None
        await store.decide("telegram", "42", Access.DENY, actor="slack:C", now_ms=1002)
        [grant] = await store.grants()
        assert (grant.key, grant.access, grant.actor) == ("telegram:42", Access.DENY, "slack:C")


def test_code_shapes() -> None:
    assert normalize_code(" k7qh-2m ") == "K7QH2M"
    assert looks_like_code("k7qh2m")
    assert not looks_like_code("K7QH2O")  # O is not in the alphabet
    assert not looks_like_code("K7QH2")
