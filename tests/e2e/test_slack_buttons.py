"""Slack's Use / Dismiss buttons end to end over real HTTP: the suggestion block is posted with
Block Kit buttons; a signed `block_actions` request into /slack/events is handled as the
command its button carries, for that conversation and user; a click by someone who is not
allowed changes nothing and says nothing; a forged click is 401 and changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from channels.slack import SlackChannel
from gateway.app.app import App
from gateway.knowledge.feature import KnowledgeFeature
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM
from tests.fakes.slack import (
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    FakeSlackAPI,
    action_body,
    buttons_of,
    dm_event,
    event_body,
    running_fake_slack,
    signed_headers,
)
from tests.gateway.knowledge.support import knowledge_config, request_text, write
from tests.gateway.suggestions.support import DEPLOY

ALLOWED = "U1"
STRANGER = "U9"
DEPLOY_Q = "the canary deploy failed, how do I roll back the release?"
RUNBOOK = "Runbook: rolling back a deploy"
FORM = "application/x-www-form-urlencoded"


class Running:
    def __init__(self, app: App, api: FakeSlackAPI, session: aiohttp.ClientSession) -> None:
        self.app, self.api, self.session = app, api, session
        assert app.http is not None
        self.url = f"http://127.0.0.1:{app.http.port}/slack/events"

    async def deliver(self, body: str, *, kind: str = "application/json", **sign: Any) -> int:
        headers = signed_headers(body, content_type=kind, **sign)
        async with self.session.post(self.url, data=body, headers=headers) as r:
            return r.status

    async def posted(self, count: int) -> list[dict[str, Any]]:
        await self.api.wait_for(lambda: len(self.api.posts) >= count)
        return self.api.posts

    async def statuses(self) -> list[tuple[str, str]]:
        rows = await self.app.vault.fetchall("SELECT title, status FROM suggestions ORDER BY id")
        return [(r[0], r[1]) for r in rows]


@asynccontextmanager
async def serving(tmp_path: Path, llm: FakeLLM) -> AsyncIterator[Running]:
    write(tmp_path, "deploy.md", DEPLOY)
    context = {"documents": ["docs/**/*.md"], "retrieval": "lexical", "knowledge_tokens": 0}
    config = replace(
        make_config(tmp_path, context=context, auth={"allow": [f"slack:{ALLOWED}"]},
                    http={"port": 0, "enabled": True}),
        source=knowledge_config(tmp_path).source,
    )  # fmt: skip
    async with running_fake_slack() as api:
        channel = SlackChannel(bot_token=BOT_TOKEN, mode="http", signing_secret=SIGNING_SECRET,
                               api_url=f"{api.url}/api/")  # fmt: skip
        async with app_with(config, channel, llm) as app, aiohttp.ClientSession() as session:
            await app.feature(KnowledgeFeature).indexer.scan()
            async with app_serving(app, channel.started):
                yield Running(app, api, session)


def button(post: dict[str, Any], label: str) -> dict[str, Any]:
    found = [b for b in buttons_of(post) if b["text"]["text"] == label]
    assert found, f"no button {label!r} in {buttons_of(post)}"
    return found[0]


async def test_use_button_puts_the_item_into_the_next_request(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("Here is how.").enqueue_text("Step one.")
    async with serving(tmp_path, llm) as run:
        assert await run.deliver(event_body(dm_event(DEPLOY_Q, user=ALLOWED))) == 200
        reply, block = await run.posted(2)
        assert not buttons_of(reply)
        assert RUNBOOK in block["text"]
        assert [(b["text"]["text"], b["value"]) for b in buttons_of(block)] == [
            ("Use 1", "/use #1"),
            ("Dismiss 1", "/dismiss #1"),
        ]
        click = action_body(button(block, "Use 1"), user=ALLOWED)
        assert await run.deliver(click, kind=FORM) == 200
        said = (await run.posted(3))[2]
        assert said["text"] == (
            f"Added the part of “{RUNBOOK}” that fits this conversation to the context of your "
            "next message."
        )
        assert said["channel"] == "D1"
        event = dm_event("ok, walk me through it", user=ALLOWED, ts="1767225900.000100")
        assert await run.deliver(event_body(event, event_id="Ev2")) == 200
        await run.posted(4)
        assert "roll back to the previous release" in request_text(llm.requests[-1])
        assert await run.statuses() == [(RUNBOOK, "used")]


async def test_dismiss_button_hides_the_item(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("Here is how.")
    async with serving(tmp_path, llm) as run:
        assert await run.deliver(event_body(dm_event(DEPLOY_Q, user=ALLOWED))) == 200
        _, block = await run.posted(2)
        click = action_body(button(block, "Dismiss 1"), user=ALLOWED)
        assert await run.deliver(click, kind=FORM) == 200
        said = (await run.posted(3))[2]
        assert said["text"].startswith(f"Dismissed “{RUNBOOK}”")
        assert await run.statuses() == [(RUNBOOK, "dismissed")]


async def test_clicks_by_strangers_and_forged_clicks_change_nothing(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("Here is how.")
    async with serving(tmp_path, llm) as run:
        question = {"type": "app_mention", "channel": "C1", "user": ALLOWED,
                    "text": f"<@{BOT_USER}> {DEPLOY_Q}", "ts": "1767225600.000100"}  # fmt: skip
        assert await run.deliver(event_body(question)) == 200
        _, block = await run.posted(2)
        assert block["channel"] == "C1" and block["thread_ts"] == "1767225600.000100"
        thread = {"channel": "C1", "thread_ts": "1767225600.000100"}
        stranger = action_body(button(block, "Dismiss 1"), user=STRANGER, **thread)
        assert await run.deliver(stranger, kind=FORM) == 200
        forged = action_body(button(block, "Use 1"), user=ALLOWED, **thread)
        assert await run.deliver(forged, kind=FORM, secret="wrong") == 401
        assert await run.deliver(forged, kind=FORM, at=1_000_000_000) == 401  # stale
        await run.app.router.drain()
        assert len(run.api.posts) == 2  # nothing said in the channel
        assert await run.statuses() == [(RUNBOOK, "shown")]
