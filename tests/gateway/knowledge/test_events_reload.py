"""Provider settings changed by another process on the same vault (a replica, an `iris chat`
beside `iris run`) apply here within `RELOAD_S`, a priority reset to its default included; a
change made here is never undone by a read that started before it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.agent.context import ContextPipeline, Phase
from gateway.core.clock import ManualClock
from gateway.core.errors import VaultError
from gateway.knowledge.events import RELOAD_S, ProviderEvents
from tests.gateway.agent.test_context import Static
from vault.audit import AuditLog
from vault.context_settings import ContextSettings, ProviderSetting
from vault.db import Vault
from vault.migrations import migrate


@pytest.fixture
async def vault(tmp_path: Path) -> AsyncIterator[Vault]:
    async with Vault(tmp_path / "v.db") as opened:
        await migrate(opened)
        yield opened


def events(vault: Vault, clock: ManualClock) -> ProviderEvents:
    pipeline = ContextPipeline(
        budget_tokens=1000,
        providers=[
            Static("profile", Phase.SYSTEM, None, 50),
            Static("memories", Phase.ENRICH, None, 50),
        ],
    )
    return ProviderEvents(
        pipeline=pipeline, store=ContextSettings(vault), audit=AuditLog(vault), clock=clock
    )


def state(side: ProviderEvents) -> dict[str, tuple[bool, int]]:
    return {p.name: (p.enabled, p.priority) for p in side.pipeline.providers()}


async def test_another_process_change_applies_within_the_reload_period(vault: Vault) -> None:
    clock = ManualClock()
    here, there = events(vault, clock), events(vault, clock)
    await here.listing()  # read here before the change
    await there.change("profile", enabled=False, actor="boss", via="chat")
    await there.change("memories", priority=7, actor="boss", via="chat")
    await here.ensure_loaded()
    assert state(here)["profile"] == (True, 50)  # read less than RELOAD_S ago
    clock.advance(RELOAD_S * 1000)
    await here.ensure_loaded()
    assert state(here) == {"profile": (False, 50), "memories": (True, 7)}
    await there.change("memories", priority=50, actor="boss", via="chat")  # the default
    clock.advance(RELOAD_S * 1000)
    await here.ensure_loaded()
    assert state(here)["memories"] == (True, 50)


async def test_a_read_overlapping_a_local_change_does_not_undo_it(vault: Vault) -> None:
    clock = ManualClock()
    side = events(vault, clock)
    started = asyncio.Event()
    release = asyncio.Event()
    read = side.store.all

    async def slow_read() -> list[ProviderSetting]:
        rows = await read()  # the settings as they were before the change
        started.set()
        await release.wait()
        return rows

    side.store.all = slow_read  # type: ignore[method-assign]
    loading = asyncio.create_task(side.ensure_loaded())
    await started.wait()
    side.store.all = read  # type: ignore[method-assign]
    await side.change("profile", enabled=False, actor="boss", via="chat")
    release.set()
    await loading
    assert state(side)["profile"] == (False, 50)


async def test_a_failed_read_again_keeps_the_last_settings(vault: Vault) -> None:
    clock = ManualClock()
    side = events(vault, clock)
    await side.change("profile", enabled=False, actor="boss", via="chat")

    async def unreadable() -> list[ProviderSetting]:
        raise VaultError("disk gone")

    side.store.all = unreadable  # type: ignore[method-assign]
    clock.advance(RELOAD_S * 1000)
    await side.ensure_loaded()  # no error for the turn: the last settings hold
    assert state(side)["profile"] == (False, 50)


async def test_a_read_during_a_change_being_stored_does_not_undo_it(vault: Vault) -> None:
    """The change is made here, its row not yet written when a turn reads the settings."""
    clock = ManualClock()
    side = events(vault, clock)
    await side.change("profile", priority=60, actor="boss", via="chat")
    storing, written = asyncio.Event(), asyncio.Event()
    put = side.store.put

    async def slow_put(setting: ProviderSetting, *, actor: str, now_ms: int) -> None:
        storing.set()
        await written.wait()
        await put(setting, actor=actor, now_ms=now_ms)

    side.store.put = slow_put  # type: ignore[method-assign]
    clock.advance(RELOAD_S * 1000)
    changing = asyncio.create_task(side.change("profile", enabled=False, actor="b", via="chat"))
    await storing.wait()
    clock.advance(RELOAD_S * 1000)
    await side.ensure_loaded()  # reads the row as it was: (on, 60)
    written.set()
    await changing
    assert state(side)["profile"] == (False, 60)
