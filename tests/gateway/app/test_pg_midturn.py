"""PostgreSQL going away in the middle of a turn: the reply cannot be written to the outbox, so
the user gets the usual apology straight from the channel (once), the saved message stays
unfinished, and once the vault is back the message runs again and is answered — once."""

from __future__ import annotations

import asyncio
import logging
from contextlib import ExitStack
from pathlib import Path

import pytest

from gateway.core.clock import ManualClock
from gateway.core.errors import VaultError
from gateway.core.llm import LLMRequest, LLMResponse, TextPart
from gateway.core.messages import OutboundKind
from gateway.turns.router import VAULT_AWAY, Router, TurnEnd
from gateway.turns.turn import Next, Turn
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.fakes.clock import run_clock_until
from tests.fakes.postgres import PgServer
from tests.gateway.turns.test_router import Notes, admit
from tests.vault.test_pg_outage import Monotonic, outage
from vault.migrations import migrate
from vault.pg.connection import PgRaw
from vault.pg.vault import PgVault


async def test_the_vault_lost_mid_turn_apologises_directly_then_answers_once_it_is_back(
    tmp_path: Path, pg_server: PgServer, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(
        tmp_path, vault={"url": pg_url, "replica_id": "r1"}, proactive={"enabled": False}
    )
    channel, llm, away = MemoryChannel(), FakeLLM(default="the answer"), ExitStack()

    def vault_goes_away(request: LLMRequest) -> LLMResponse:
        away.enter_context(outage(pg_server, pg_url))  # while the model was thinking
        return LLMResponse(parts=(TextPart("never sent"),), stop_reason="end_turn", model="f")

    llm.enqueue_fn(vault_goes_away)
    async with (
        app_with(config, channel, llm) as app,
        app_serving(app, channel.started),
        asyncio.timeout(30),
    ):
        time = Monotonic()  # the vault's reconnect backoff, moved by hand
        for worker in (app.vault._pg_writer, app.vault._pg_reader):  # type: ignore[attr-defined]
            worker.monotonic = time
        deliver = channel.handler
        assert deliver is not None
        with caplog.at_level(logging.INFO, logger="gateway.turns.router"):
            await asyncio.gather(*await deliver([inbound("what now?", message_id="1")]))
        # The reply's outbox row could not be written: the apology went around the vault.
        [apology] = channel.sent
        assert (apology.text, apology.kind) == (VAULT_AWAY, OutboundKind.NOTICE)
        assert apology.idempotency_key.endswith(":direct")
        assert any("directly" in r.getMessage() for r in caplog.records)
        assert app.vault.problem() is not None
        assert any(h.channel == "vault" and not h.connected for h in app.channel_health())

        away.close()  # PostgreSQL takes connections again
        time.now += 60
        # The intake's next poll finds the vault back and runs the message again.
        await run_clock_until(app.clock, lambda: len(channel.sent) == 2)
        assert channel.texts() == [VAULT_AWAY, "the answer"]
        assert len(llm.requests) == 2
        # Redelivered by the platform: a duplicate, not answered again.
        await asyncio.gather(*await deliver([inbound("what now?", message_id="1")]))
        assert channel.texts() == [VAULT_AWAY, "the answer"]


class DirectNotes(Notes):
    """Notes that also write down what goes straight to the channel, around the outbox."""

    def __init__(self) -> None:
        super().__init__()
        self.direct: list[str] = []

    async def send_directly(self, turn: Turn, text: str) -> None:
        self.direct.append(text)


async def test_a_turn_failed_by_a_vault_that_is_back_before_the_error_is_handled_runs_again(
    pg_server: PgServer, pg_url: str
) -> None:
    """The vault drops mid-turn and another write reconnects it before the failed turn reaches
    the router's error handling: `problem()` is None again, yet the turn failed because of the
    outage. It must still be deferred (apology around the outbox, message run again), not
    answered with an apology through the outbox and marked finished."""
    async with PgVault(pg_url) as vault:
        await migrate(vault)

        def touch(raw: PgRaw) -> None:
            raw.execute("SELECT 1")

        async def vault_blips(turn: Turn, nxt: Next) -> None:
            with outage(pg_server, pg_url):
                pass  # every session terminated; connections allowed again at once
            try:
                await vault.on_writer(touch)  # this turn's write: the connection is gone
            except VaultError as exc:
                seen.append(vault.problem())
                await vault.on_writer(touch)  # another turn's write reconnects
                seen.append(vault.problem())
                raise VaultError("the reply could not be written") from exc

        notes, seen = DirectNotes(), list[str | None]()
        async with Router(
            steps=[admit, vault_blips],
            replier=notes,
            clock=ManualClock(),
            vault_problem=vault.problem,
            vault_connections=vault.connections,
        ) as r:
            end = await r.submit(inbound("what now?", message_id="1"))
        assert seen == ["the connection to PostgreSQL was lost", None]
        assert end is TurnEnd.DEFERRED
        assert (notes.direct, notes.sent) == ([VAULT_AWAY], [])
