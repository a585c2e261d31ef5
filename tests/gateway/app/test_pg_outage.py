"""The app while its PostgreSQL goes away: inbound messages are not confirmed (the platform
keeps them and redelivers), /healthz names the vault until it works again, and the redelivered
message is answered once when the server is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.core.errors import VaultError
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.fakes.postgres import PgServer
from tests.vault.test_pg_outage import outage


async def test_an_outage_keeps_messages_unconfirmed_and_health_says_so(
    tmp_path: Path, pg_server: PgServer, pg_url: str
) -> None:
    config = make_config(
        tmp_path, vault={"url": pg_url, "replica_id": "r1"}, proactive={"enabled": False}
    )
    channel = MemoryChannel()
    async with (
        app_with(config, channel, FakeLLM(default="answer")) as app,
        app_serving(app, channel.started),
        asyncio.timeout(30),
    ):
        deliver = channel.handler
        assert deliver is not None
        await asyncio.gather(*await deliver([inbound("before", message_id="1")]))
        assert channel.texts() == ["answer"]
        assert all(h.channel != "vault" for h in app.channel_health())
        late = inbound("during", message_id="2")
        with outage(pg_server, pg_url), pytest.raises(VaultError):
            await deliver([late])  # not saved: the channel does not confirm it
        down = {h.channel: h for h in app.channel_health()}
        assert not down["vault"].connected and not down["intake"].connected
        assert "PostgreSQL" in (down["vault"].detail or "")
        # The server is back; the platform redelivers: the message is answered, once.
        await asyncio.gather(*await deliver([late]))
        await asyncio.gather(*await deliver([late]))  # a second redelivery: a duplicate
        assert channel.texts() == ["answer", "answer"]
        assert {h.channel for h in app.channel_health()} <= {"memory"}
