"""Telegram's Use / Dismiss buttons end to end: the suggestion block arrives with an inline
keyboard through the real adapter and the faked Bot API; a press (a callback query) is saved
and handled as the command it names, for that chat and user, and acknowledged; a press by
someone who is not allowed changes nothing and is acknowledged with nothing private."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import respx

from channels.telegram import TelegramChannel
from channels.telegram.channel import PRESSED
from gateway.app.app import App
from gateway.knowledge.feature import KnowledgeFeature
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM
from tests.fakes.telegram import (
    BASE,
    BOT_USERNAME,
    TOKEN,
    FakeBotAPI,
    buttons_of,
    callback_update,
    mention,
    message_update,
)
from tests.gateway.knowledge.support import knowledge_config, request_text, write
from tests.gateway.suggestions.support import DEPLOY

ALLOWED = 42
STRANGER = 99
GROUP = -100500
DEPLOY_Q = "the canary deploy failed, how do I roll back the release?"
RUNBOOK = "Runbook: rolling back a deploy"


@asynccontextmanager
async def serving(tmp_path: Path, llm: FakeLLM) -> AsyncIterator[tuple[App, FakeBotAPI]]:
    write(tmp_path, "deploy.md", DEPLOY)
    context = {"documents": ["docs/**/*.md"], "retrieval": "lexical", "knowledge_tokens": 0}
    config = replace(
        make_config(tmp_path, context=context, auth={"allow": [f"telegram:{ALLOWED}"]}),
        source=knowledge_config(tmp_path).source,
    )
    with respx.mock(assert_all_called=False) as router:
        api = FakeBotAPI(router)
        channel = TelegramChannel(token=TOKEN, base_url=BASE)
        async with app_with(config, channel, llm) as app:
            await app.feature(KnowledgeFeature).indexer.scan()
            async with app_serving(app, channel.started):
                yield app, api


async def statuses(app: App) -> list[tuple[str, str]]:
    rows = await app.vault.fetchall("SELECT title, status FROM suggestions ORDER BY id")
    return [(r[0], r[1]) for r in rows]


def press(block: dict[str, str], label: str, **kw: Any) -> dict[str, object]:
    """The callback update for the button labelled `label` under a sent block."""
    found = [b for row in buttons_of(block) for b in row if b["text"] == label]
    assert found, f"no button {label!r} in {buttons_of(block)}"
    return callback_update(found[0]["callback_data"], **kw)


async def test_use_button_puts_the_item_into_the_next_request(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("Here is how.").enqueue_text("Step one.")
    async with serving(tmp_path, llm) as (app, api):
        api.queue_updates(message_update(DEPLOY_Q, user_id=ALLOWED))
        reply, block = await api.wait_sent(2)
        assert "reply_markup" not in reply
        assert RUNBOOK in block["text"]
        assert buttons_of(block) == [
            [
                {"text": "Use 1", "callback_data": "/use #1"},
                {"text": "Dismiss 1", "callback_data": "/dismiss #1"},
            ]
        ]
        api.queue_updates(press(block, "Use 1", user_id=ALLOWED))
        said = (await api.wait_sent(3))[2]
        assert said["text"] == (
            f"Added the part of “{RUNBOOK}” that fits this conversation to the context of your "
            "next message."
        )
        assert said["chat_id"] == str(ALLOWED)
        (answer,) = await api.wait_answers(1)
        assert answer["text"] == PRESSED
        api.queue_updates(message_update("ok, walk me through it", user_id=ALLOWED))
        await api.wait_sent(4)
        assert "roll back to the previous release" in request_text(llm.requests[-1])
        assert await statuses(app) == [(RUNBOOK, "used")]


async def test_dismiss_button_hides_the_item_and_a_repeated_press_counts_once(
    tmp_path: Path,
) -> None:
    llm = FakeLLM().enqueue_text("Here is how.")
    async with serving(tmp_path, llm) as (app, api):
        api.queue_updates(message_update(DEPLOY_Q, user_id=ALLOWED))
        _, block = await api.wait_sent(2)
        pressed = press(block, "Dismiss 1", user_id=ALLOWED)
        api.queue_updates(pressed)
        said = (await api.wait_sent(3))[2]
        assert said["text"].startswith(f"Dismissed “{RUNBOOK}”")
        polls = api.polls
        api.queue_updates(pressed)  # Telegram redelivers the same update: handled once
        await api.wait_polls(polls + 1)  # saved, answered, polling again
        assert len(api.answers) == 2
        await app.router.drain()
        assert len(api.sent) == 3
        assert await statuses(app) == [(RUNBOOK, "dismissed")]


async def test_a_press_by_someone_not_allowed_changes_nothing(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("Here is how.")
    async with serving(tmp_path, llm) as (app, api):
        question = f"@{BOT_USERNAME} {DEPLOY_Q}"
        api.queue_updates(
            message_update(
                question, user_id=ALLOWED, chat_id=GROUP, chat_type="group",
                entities=mention(question),
            )
        )  # fmt: skip
        _, block = await api.wait_sent(2)
        polls = api.polls
        api.queue_updates(
            press(block, "Dismiss 1", user_id=STRANGER, chat_id=GROUP, chat_type="group"),
            press(block, "Use 1", user_id=STRANGER, chat_id=GROUP, chat_type="group"),
        )
        await api.wait_polls(polls + 1)  # saved, answered, polling again
        await app.router.drain()
        assert [a["text"] for a in api.answers] == [PRESSED, PRESSED]  # nothing private
        assert len(api.sent) == 2  # nothing said in the group
        assert await statuses(app) == [(RUNBOOK, "shown")]
