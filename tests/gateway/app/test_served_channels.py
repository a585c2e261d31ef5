"""Two processes on one vault, each running other channels (`iris run` with Telegram, `iris
chat` with the console): each leaves the other's work alone. Before, a console session
started on the vault replayed Telegram's saved messages, failed Telegram's waiting replies
("no channel 'telegram' is running") and claimed its follow-ups — lost messages for people
who never touched the console.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gateway.core.clock import ManualClock
from gateway.core.errors import DeliveryTransient
from proactive.feature import ProactiveFeature
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from vault.db import Vault
from vault.intake import IntakeStore

HOUR_S = 3600


async def statuses(vault: Vault) -> tuple[list[str], list[str], dict[str, int]]:
    """The outbox rows, the follow-ups and the saved inbound messages, by state."""
    outbox = await vault.fetchall("SELECT status FROM outbox ORDER BY id")
    intents = await vault.fetchall("SELECT status FROM proactive_intents ORDER BY id")
    return [r[0] for r in outbox], [r[0] for r in intents], await IntakeStore(vault).counts()


async def test_a_process_leaves_the_work_of_channels_it_does_not_run(tmp_path: Path) -> None:
    config = make_config(tmp_path, auth={"allow": ["telegram:*", "console:*"]},
                         http={"enabled": True, "port": 0})  # fmt: skip
    clock = ManualClock()
    telegram, llm = MemoryChannel(name="telegram"), FakeLLM()
    async with app_with(config, telegram, llm, clock) as app:
        # A follow-up for tomorrow, and a reply held by a long rate limit.
        llm.enqueue_tool("proactive_intent", {"what": "ask if the fix held", "delay_minutes": 60})
        llm.enqueue_text("I'll check in an hour.")
        telegram.fail_with.append(DeliveryTransient("429", retry_after_s=HOUR_S))
        await app.router.submit(inbound("the fix is deployed", channel="telegram"))
        # A message saved at intake whose turn a crash cut off.
        await IntakeStore(app.vault).admit([inbound("still there?", channel="telegram")], 0)
        await app.vault.idle()
        assert await statuses(app.vault) == (["pending"], ["pending"], {"pending": 1})

    clock.advance(2 * HOUR_S)  # everything is due
    console = MemoryChannel(name="console")
    async with app_with(config, console, FakeLLM("console answer"), clock) as app:
        # Said, not hidden: the log at start, and `/healthz` `degraded` (the reply's metric
        # alone said it before).
        assert app.http is not None
        url = f"http://127.0.0.1:{app.http.port}/healthz"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            report = await response.json()
        assert report["degraded"] == [
            "outbox: replies wait for channels not running here (1 for telegram)"
        ]
        assert await app.intake.replay() == 0
        await app.delivery.resend_pending()
        engine = app.feature(ProactiveFeature).engine
        assert engine is not None
        assert (await engine.tick()).claimed == 0
        await app.vault.idle()
        assert await statuses(app.vault) == (["pending"], ["pending"], {"pending": 1})
    assert console.sent == []

    back, llm = MemoryChannel(name="telegram"), FakeLLM("yes, still here")
    async with app_with(config, back, llm, clock) as app:
        assert app.delivery.unserved_line() is None
        await app.delivery.resend_pending()
        engine = app.feature(ProactiveFeature).engine
        assert engine is not None
        llm.enqueue_tool("proactive_decision", {"action": "skip", "reason": "not needed"})
        assert (await engine.tick()).claimed == 1
        async with app_serving(app, back.started):  # serving replays the saved message first
            pass
    assert back.texts()[0] == "I'll check in an hour."
    assert "yes, still here" in back.texts()
