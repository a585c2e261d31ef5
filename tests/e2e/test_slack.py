"""Slack end to end over real HTTP: signed events into our server's /slack/events -> App
(router, auth, FakeLLM) -> chat.postMessage on the loopback fake Web API. Also /healthz."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from channels.slack import SlackChannel
from gateway.app.app import App
from tests.conftest import app_serving, app_with, make_config
from tests.fakes import FakeLLM
from tests.fakes.slack import (
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    FakeSlackAPI,
    command_body,
    dm_event,
    event_body,
    running_fake_slack,
    signed_headers,
)

ALLOWED = "U1"
STRANGER = "U9"


class Running:
    def __init__(self, app: App, api: FakeSlackAPI, session: aiohttp.ClientSession) -> None:
        self.app, self.api, self.session = app, api, session
        assert app.http is not None
        self.base = f"http://127.0.0.1:{app.http.port}"

    async def deliver(self, body: str, *, form: bool = False, retry: int | None = None) -> int:
        kind = "application/x-www-form-urlencoded" if form else "application/json"
        headers = signed_headers(body, content_type=kind)
        if retry is not None:
            headers["x-slack-retry-num"] = str(retry)
        async with self.session.post(f"{self.base}/slack/events", data=body, headers=headers) as r:
            return r.status

    async def health(self) -> tuple[int, dict[str, Any]]:
        async with self.session.get(f"{self.base}/healthz") as r:
            return r.status, await r.json()


@asynccontextmanager
async def serving(
    tmp_path: Path, llm: FakeLLM, auth: dict[str, object] | None = None
) -> AsyncIterator[Running]:
    config = make_config(
        tmp_path,
        auth=auth or {"allow": [f"slack:{ALLOWED}"]},
        http={"port": 0, "enabled": True},
    )
    async with running_fake_slack() as api:
        channel = SlackChannel(
            bot_token=BOT_TOKEN,
            mode="http",
            signing_secret=SIGNING_SECRET,
            api_url=f"{api.url}/api/",
        )
        async with (
            app_with(config, channel, llm) as app,
            aiohttp.ClientSession() as session,
            app_serving(app, channel.started),
        ):
            yield Running(app, api, session)


def mention(text: str, *, user: str, ts: str, thread_ts: str | None = None) -> dict[str, Any]:
    event = {"type": "app_mention", "channel": "C1", "user": user, "text": text, "ts": ts}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


async def test_dm_gets_a_mrkdwn_reply(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("**Hi** & welcome")
    async with serving(tmp_path, llm) as run:
        assert await run.deliver(event_body(dm_event("hello", user=ALLOWED))) == 200
        await run.api.wait_for(lambda: run.api.posts)
        status, health = await run.health()
    assert run.api.posts[0]["text"] == "*Hi* &amp; welcome"
    assert run.api.posts[0]["channel"] == "D1"
    assert "hello" in str(llm.requests[0].messages)
    assert status == 200
    assert health["ok"] is True
    assert health["channels"]["slack"]["connected"] is True
    assert health["channels"]["slack"]["last_inbound_ms"] is not None


async def test_retries_and_the_message_mention_pair_get_one_answer(tmp_path: Path) -> None:
    llm = FakeLLM()
    ts = "1767225600.000200"
    text = f"<@{BOT_USER}> status?"
    as_message = {
        **mention(text, user=ALLOWED, ts=ts),
        "type": "message",
        "channel_type": "channel",
    }
    async with serving(tmp_path, llm) as run:
        await run.deliver(event_body(mention(text, user=ALLOWED, ts=ts), event_id="EvA"))
        await run.deliver(event_body(mention(text, user=ALLOWED, ts=ts), event_id="EvA"), retry=1)
        await run.deliver(event_body(as_message, event_id="EvB"))
        await run.api.wait_for(lambda: run.api.posts)
    assert len(run.api.posts) == 1
    assert run.api.posts[0]["thread_ts"] == ts  # answered in the thread of the mention
    assert len(llm.requests) == 1


async def test_forged_request_over_http_is_401_and_nothing_runs(tmp_path: Path) -> None:
    llm = FakeLLM()
    body = event_body(dm_event("forged", user=ALLOWED))
    async with serving(tmp_path, llm) as run:
        headers = signed_headers(body, secret="wrong", content_type="application/json")
        async with run.session.post(f"{run.base}/slack/events", data=body, headers=headers) as r:
            assert r.status == 401
    assert run.api.posts == []
    assert llm.requests == []


async def test_stranger_in_dm_gets_a_notice_and_no_model_reply(tmp_path: Path) -> None:
    llm = FakeLLM()
    async with serving(tmp_path, llm) as run:
        await run.deliver(event_body(dm_event("let me in", user=STRANGER)))
        await run.api.wait_for(lambda: run.api.posts)
    assert f"slack:{STRANGER}" in run.api.posts[0]["text"]
    assert llm.requests == []


async def test_stranger_mention_in_a_channel_gets_silence(tmp_path: Path) -> None:
    llm = FakeLLM().enqueue_text("for the allowed user")
    thread = "1767225000.000001"
    async with serving(tmp_path, llm) as run:
        # Same thread = same chat, handled in order: the answer to the second proves the first
        # was handled, with no reply.
        await run.deliver(
            event_body(
                mention(f"<@{BOT_USER}> hi", user=STRANGER, ts="1767225600.1", thread_ts=thread),
                event_id="E1",
            )
        )
        await run.deliver(
            event_body(
                mention(f"<@{BOT_USER}> hi", user=ALLOWED, ts="1767225600.2", thread_ts=thread),
                event_id="E2",
            )
        )
        await run.api.wait_for(lambda: run.api.posts)
    assert [p["text"] for p in run.api.posts] == ["for the allowed user"]
    assert len(llm.requests) == 1


async def test_slash_command_runs_the_shared_command(tmp_path: Path) -> None:
    llm = FakeLLM()
    async with serving(tmp_path, llm) as run:
        body = command_body("help", user=ALLOWED, response_url=f"{run.api.url}/respond/1")
        assert await run.deliver(body, form=True) == 200
        await run.api.wait_for(lambda: run.api.responses)
    (answer,) = run.api.responses
    assert "/iris clear" in answer["text"]  # help lists commands the way Slack users type them
    assert run.api.posts == []
    assert llm.requests == []


async def test_admin_subcommand_only_for_admins(tmp_path: Path) -> None:
    auth = {"allow": [f"slack:{ALLOWED}"], "admins": ["slack:UADMIN"]}
    async with serving(tmp_path, FakeLLM(), auth=auth) as run:
        for n, user in enumerate((ALLOWED, "UADMIN"), 1):
            body = command_body("admin users", user=user, response_url=f"{run.api.url}/respond/{n}")
            assert await run.deliver(body, form=True) == 200
            await run.api.wait_for(lambda n=n: len(run.api.responses) >= n)
        entries = await run.app.audit.recent()
    refused, allowed = (r["text"] for r in run.api.responses)
    assert "/iris admin is not allowed" in refused
    assert "slack:U1" in allowed  # the user list, in the admin's thread of replies
    assert [(e.actor, e.outcome) for e in reversed(entries)] == [
        ("slack:U1", "refused"),
        ("slack:UADMIN", "ok"),
    ]
