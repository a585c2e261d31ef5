"""The Slack adapter against a loopback fake Web API, with signed requests into /slack/events."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
from slack_sdk.errors import SlackApiError

from channels.slack import SlackChannel
from gateway.core.errors import (
    ChatUnreachable,
    DeliveryPermanent,
    DeliveryTransient,
    FatalChannelError,
    VaultError,
)
from gateway.core.messages import Button, ChatRef, Outbound, WebRequest, WebResponse
from tests.fakes import Inbox
from tests.fakes.slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlackAPI,
    action_body,
    buttons_of,
    command_body,
    dm_event,
    event_body,
    running_fake_slack,
    signed_headers,
)

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackAPI]:
    async with running_fake_slack() as api:
        yield api


def make_channel(fake: FakeSlackAPI) -> SlackChannel:
    return SlackChannel(
        bot_token=BOT_TOKEN,
        mode="http",
        signing_secret=SIGNING_SECRET,
        api_url=f"{fake.url}/api/",
    )


@pytest.fixture
async def running(fake: FakeSlackAPI) -> AsyncIterator[tuple[SlackChannel, Inbox]]:
    inbox = Inbox()
    async with make_channel(fake) as channel:
        task = asyncio.create_task(channel.run(inbox))
        try:
            await asyncio.wait_for(channel.started.wait(), 5)
            yield channel, inbox
        finally:
            task.cancel()
            await asyncio.wait([task])


async def post(
    channel: SlackChannel, body: str, headers: dict[str, str], *, retry: int | None = None
) -> WebResponse:
    if retry is not None:
        headers = {**headers, "x-slack-retry-num": str(retry), "x-slack-retry-reason": "timeout"}
    (route,) = channel.routes()
    return await route.handler(
        WebRequest(
            method="POST", path="/slack/events", headers=headers, query="", body=body.encode()
        )
    )


async def test_signed_dm_event_is_acked_and_handed_over(
    running: tuple[SlackChannel, Inbox],
) -> None:
    channel, inbox = running
    body = event_body(dm_event("hello &amp; welcome"))
    response = await post(channel, body, signed_headers(body, content_type=JSON))
    assert response.status == 200
    (item,) = await inbox.wait(1)
    assert item.text == "hello & welcome"
    assert item.chat == ChatRef(channel="slack", chat_id="D1")
    assert "slack:event:Ev1" in item.dedupe_keys
    assert channel.health().connected


async def test_forged_and_stale_requests_are_rejected(
    running: tuple[SlackChannel, Inbox],
) -> None:
    channel, inbox = running
    body = event_body(dm_event("sneaky"))
    forged = signed_headers(body, secret="not-the-secret", content_type=JSON)
    stale = signed_headers(body, at=time.time() - 600, content_type=JSON)
    unsigned = {"content-type": JSON}
    for headers in (forged, stale, unsigned):
        assert (await post(channel, body, headers)).status == 401
    # A valid request afterwards is the first and only thing handed over.
    ok = event_body(dm_event("real"), event_id="Ev2")
    assert (await post(channel, ok, signed_headers(ok, content_type=JSON))).status == 200
    assert [i.text for i in await inbox.wait(1)] == ["real"]


async def test_retried_delivery_carries_the_same_dedupe_keys(
    running: tuple[SlackChannel, Inbox],
) -> None:
    channel, inbox = running
    body = event_body(dm_event("once"))
    await post(channel, body, signed_headers(body, content_type=JSON))
    response = await post(channel, body, signed_headers(body, content_type=JSON), retry=1)
    assert response.status == 200  # acked, never a 404 that Slack would retry again
    first, second = await inbox.wait(2)
    assert first.dedupe_keys == second.dedupe_keys  # the router's vault dedupe drops the second


async def test_unhandled_event_types_are_acked(running: tuple[SlackChannel, Inbox]) -> None:
    channel, inbox = running
    body = event_body({"type": "reaction_added", "user": "U1", "reaction": "+1"})
    assert (await post(channel, body, signed_headers(body, content_type=JSON))).status == 200
    assert inbox.items == []


async def test_url_verification_challenge(running: tuple[SlackChannel, Inbox]) -> None:
    channel, _ = running
    body = '{"type": "url_verification", "challenge": "abc", "token": "x"}'
    response = await post(channel, body, signed_headers(body, content_type=JSON))
    assert response.status == 200
    assert "abc" in response.body


async def test_slash_command_is_translated_and_answered_through_respond(
    running: tuple[SlackChannel, Inbox], fake: FakeSlackAPI
) -> None:
    channel, inbox = running
    body = command_body("clear", response_url=f"{fake.url}/respond/1")
    response = await post(channel, body, signed_headers(body, content_type=FORM))
    assert response.status == 200
    (item,) = await inbox.wait(1)
    assert item.text == "/clear"
    assert channel.command_hint("clear") == "/iris clear"
    await channel.send(
        Outbound(chat=item.chat, text="Cleared.", idempotency_key="x", reply_to=item.message_id)
    )
    assert fake.responses[0]["text"] == "Cleared."
    assert fake.posts == []


async def test_a_command_answer_without_its_responder_is_shown_to_the_user_alone(
    running: tuple[SlackChannel, Inbox], fake: FakeSlackAPI
) -> None:
    channel, inbox = running
    body = command_body("admin users", response_url=f"{fake.url}/respond/1", channel="C1")
    await post(channel, body, signed_headers(body, content_type=FORM))
    (item,) = await inbox.wait(1)
    # A restart: the new process has no responder for the replayed command's answer.
    fresh = make_channel(fake)
    answer = "Users: U1 (tz Europe/Berlin)"
    out = Outbound(chat=item.chat, text=answer, idempotency_key="a", reply_to=item.message_id)
    await fresh.send(out)
    assert fake.posts == []  # never to the whole channel
    assert [(e["channel"], e["user"], e["text"]) for e in fake.ephemerals] == [
        (item.chat.chat_id, item.user.user_id, answer)
    ]
    # Saved by an older version, the id names no user: the answer is dropped, not posted,
    # except in a direct message, where a post is for that user alone anyway.
    await fresh.send(Outbound(chat=item.chat, text=answer, idempotency_key="b", reply_to="cmd-1.2"))
    assert fake.posts == [] and len(fake.ephemerals) == 1
    dm = ChatRef(channel="slack", chat_id="D9")
    await fresh.send(Outbound(chat=dm, text="in a DM", idempotency_key="c", reply_to="cmd-1.3"))
    assert [p["text"] for p in fake.posts] == ["in a DM"]


async def test_a_thread_command_typed_in_a_channel_says_where_to_write_it(
    running: tuple[SlackChannel, Inbox], fake: FakeSlackAPI
) -> None:
    channel, inbox = running
    body = command_body("clear", response_url=f"{fake.url}/respond/1", channel="C1")
    response = await post(channel, body, signed_headers(body, content_type=FORM))
    assert response.status == 200
    assert "each conversation with me is a thread" in response.body
    assert "/clear" in response.body
    # Not run on an empty conversation of the channel; other commands still are.
    body = command_body("status", response_url=f"{fake.url}/respond/2", channel="C1")
    await post(channel, body, signed_headers(body, content_type=FORM))
    assert [i.text for i in await inbox.wait(1)] == ["/status"]


async def test_send_posts_mrkdwn_in_the_thread(fake: FakeSlackAPI) -> None:
    channel = make_channel(fake)
    chat = ChatRef(channel="slack", chat_id="C1", thread_id="1767225600.000100")
    await channel.send(Outbound(chat=chat, text="**hi** <b>", idempotency_key="k"))
    assert fake.posts[0]["text"] == "*hi* &lt;b&gt;"
    assert fake.posts[0]["thread_ts"] == "1767225600.000100"


async def test_a_rate_limit_is_not_slept_on_inside_the_sdk(fake: FakeSlackAPI) -> None:
    """A 429 surfaces at once with its Retry-After: delivery decides whether the turn waits
    (a short one) or leaves the message to the background resend (a long one)."""
    fake.rate_limit(1, retry_after="600")
    channel = make_channel(fake)
    message = Outbound(chat=ChatRef(channel="slack", chat_id="D1"), text="x", idempotency_key="k")
    with pytest.raises(DeliveryTransient) as caught:
        await channel.send(message)
    assert caught.value.retry_after_s == 600.0
    assert fake.calls.count("chat.postMessage") == 1
    await channel.send(message)  # the retry goes through
    assert [p["text"] for p in fake.posts] == ["x"]


async def test_persistent_rate_limit_is_transient_with_retry_after(fake: FakeSlackAPI) -> None:
    fake.rate_limit(5, retry_after="0")
    channel = make_channel(fake)
    with pytest.raises(DeliveryTransient) as caught:
        await channel.send(
            Outbound(chat=ChatRef(channel="slack", chat_id="D1"), text="x", idempotency_key="k")
        )
    assert caught.value.retry_after_s == 0.0
    assert fake.posts == []


async def test_post_errors_map_into_the_tree(fake: FakeSlackAPI) -> None:
    channel = make_channel(fake)
    for code, error in (
        ("channel_not_found", ChatUnreachable),
        ("msg_too_long", DeliveryPermanent),
    ):
        fake.post_error = code
        with pytest.raises(error):
            await channel.send(
                Outbound(
                    chat=ChatRef(channel="slack", chat_id="C1"), text="x", idempotency_key=code
                )
            )


async def test_invalid_bot_token_is_fatal(fake: FakeSlackAPI) -> None:
    fake.auth_error = "invalid_auth"
    channel = make_channel(fake)
    with pytest.raises(FatalChannelError) as caught:
        await channel.run(Inbox())
    assert BOT_TOKEN not in str(caught.value)
    assert isinstance(caught.value.__cause__, SlackApiError)
    assert "SLACK_BOT_TOKEN" in channel.health().detail


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"bot_token": "xoxp-user", "mode": "http", "signing_secret": "s"}, "xoxb-"),
        ({"bot_token": BOT_TOKEN, "mode": "socket"}, "SLACK_APP_TOKEN"),
        ({"bot_token": BOT_TOKEN, "mode": "http"}, "SLACK_SIGNING_SECRET"),
    ],
)
def test_missing_or_wrong_tokens_are_fatal_at_construction(
    kwargs: dict[str, str], needle: str
) -> None:
    with pytest.raises(FatalChannelError, match=needle):
        SlackChannel(**kwargs)  # type: ignore[arg-type]


async def test_socket_mode_receives_acks_and_reports_health(fake: FakeSlackAPI) -> None:
    inbox = Inbox()
    channel = SlackChannel(
        bot_token=BOT_TOKEN, mode="socket", app_token="xapp-test", api_url=f"{fake.url}/api/"
    )
    assert channel.routes() == []
    async with channel:
        task = asyncio.create_task(channel.run(inbox))
        try:
            await asyncio.wait_for(channel.started.wait(), 5)
            await fake.wait_for(lambda: fake.sockets)
            await fake.push_event("env-1", event_body(dm_event("over the socket")))
            (item,) = await inbox.wait(1)
            await fake.wait_for(lambda: fake.acks)
            assert item.text == "over the socket"
            assert fake.acks[0]["envelope_id"] == "env-1"
            assert channel.health().connected
        finally:
            task.cancel()
            await asyncio.wait([task])
    assert not channel.health().connected


async def test_a_malformed_socket_envelope_is_acked_and_dropped(
    fake: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox()
    channel = SlackChannel(
        bot_token=BOT_TOKEN, mode="socket", app_token="xapp-test", api_url=f"{fake.url}/api/"
    )
    async with channel:
        task = asyncio.create_task(channel.run(inbox))
        try:
            await asyncio.wait_for(channel.started.wait(), 5)
            await fake.wait_for(lambda: fake.sockets)
            with caplog.at_level(logging.WARNING):
                await fake.push_event("env-bad", '{"type": "event_callback", "event": "garbage"}')
                await fake.wait_for(lambda: fake.acks)
            assert fake.acks[0]["envelope_id"] == "env-bad"  # not delivered again and again
            assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
                "slack: malformed Socket Mode envelope (event is not an object); acked, dropped"
            ]
            await fake.push_event("env-2", event_body(dm_event("after it")))
            assert [i.text for i in await inbox.wait(1)] == ["after it"]
        finally:
            task.cancel()
            await asyncio.wait([task])


async def test_socket_mode_clicks_are_saved_then_acked(fake: FakeSlackAPI) -> None:
    inbox = Inbox()
    channel = SlackChannel(
        bot_token=BOT_TOKEN, mode="socket", app_token="xapp-test", api_url=f"{fake.url}/api/"
    )
    use = {"action_id": "iris_button_1", "text": {"type": "plain_text", "text": "Use 1"}}
    async with channel:
        task = asyncio.create_task(channel.run(inbox))
        try:
            await asyncio.wait_for(channel.started.wait(), 5)
            await fake.wait_for(lambda: fake.sockets)
            await fake.push_interactive("env-click", action_body({**use, "value": "/use 1"}))
            (item,) = await inbox.wait(1)
            await fake.wait_for(lambda: fake.acks)
            assert (item.text, item.chat.chat_id, item.user.user_id) == ("/use 1", "D1", "U1")
            assert [a["envelope_id"] for a in fake.acks] == ["env-click"]
        finally:
            task.cancel()
            await asyncio.wait([task])


async def test_events_before_the_channel_runs_are_not_acked_so_slack_redelivers(
    fake: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    channel = make_channel(fake)
    body = event_body(dm_event("too early"), event_id="EvEarly")
    headers = signed_headers(body, content_type=JSON)
    with caplog.at_level(logging.INFO, logger="channels.slack.channel"):
        for retry in (None, 1):  # a retry that is still early gets the same answer
            response = await post(channel, body, headers, retry=retry)
            assert response.status == 503  # "retry later", not a server error
            assert response.headers["Retry-After"].isdigit()
            assert json.loads(response.body) == {"error": "starting up, retry later"}
        early = [r for r in caplog.records if "before the channel is running" in r.message]
        assert len(early) == 1 and early[0].exc_info is None  # once, and no traceback
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        command = command_body("clear", response_url=f"{fake.url}/respond/1")
        response = await post(channel, command, signed_headers(command, content_type=FORM))
        assert response.status == 200
        assert "starting up" in response.body
        # Running now: Slack's next retry is taken.
        inbox = Inbox()
        task = asyncio.create_task(channel.run(inbox))
        try:
            await asyncio.wait_for(channel.started.wait(), 5)
            assert (await post(channel, body, headers, retry=2)).status == 200
            assert [i.text for i in await inbox.wait(1)] == ["too early"]
        finally:
            task.cancel()
            await asyncio.wait([task])


async def test_interactive_payloads_are_acked(running: tuple[SlackChannel, Inbox]) -> None:
    channel, inbox = running
    payload = {
        "type": "block_actions",
        "user": {"id": "U1"},
        "team": {"id": "T1"},
        "api_app_id": "A1",
        "trigger_id": "t",
        "actions": [{"action_id": "some_button", "block_id": "b", "type": "button"}],
    }
    body = urlencode({"payload": json.dumps(payload)})
    assert (await post(channel, body, signed_headers(body, content_type=FORM))).status == 200
    assert inbox.items == []


async def test_an_event_that_does_not_translate_is_rejected_and_acked(
    running: tuple[SlackChannel, Inbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What passes the request checks translates today (`test_verify.py`); should a new event
    shape still fail, it is kept as rejected and acked, never redelivered forever."""
    channel, inbox = running

    def unknown_shape(body: object, me: object) -> None:
        raise KeyError("blocks")

    monkeypatch.setattr("channels.slack.channel.event_to_inbound", unknown_shape)
    body = event_body(dm_event("a shape from the future"), event_id="EvOdd")
    assert (await post(channel, body, signed_headers(body, content_type=JSON))).status == 200
    assert [(r.key, r.reason) for r in inbox.rejected] == [
        ("slack:event:EvOdd", "untranslatable event (KeyError)")
    ]
    assert "a shape from the future" in inbox.rejected[0].raw


async def test_an_event_is_saved_before_it_is_acked(
    running: tuple[SlackChannel, Inbox], caplog: pytest.LogCaptureFixture
) -> None:
    channel, inbox = running
    inbox.fail_with.extend([VaultError("disk full"), VaultError("disk full")])
    body = event_body(dm_event("keep me"), event_id="EvSave")
    headers = signed_headers(body, content_type=JSON)
    with caplog.at_level(logging.INFO):
        for retry in (None, 1):  # not acked: Slack redelivers
            response = await post(channel, body, headers, retry=retry)
            assert response.status == 503
            assert response.headers["Retry-After"].isdigit()
        assert inbox.items == []
        failures = [r for r in caplog.records if "could not take an event" in r.message]
        assert len(failures) == 1  # logged once, not per redelivery
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (await post(channel, body, headers, retry=2)).status == 200
    assert [i.text for i in await inbox.wait(1)] == ["keep me"]


async def test_a_click_is_saved_before_it_is_acked(running: tuple[SlackChannel, Inbox]) -> None:
    channel, inbox = running
    use = {"action_id": "iris_button_1", "text": {"type": "plain_text", "text": "Use 1"}}
    body = action_body({**use, "value": "/use 1"})
    headers = signed_headers(body, content_type=FORM)
    inbox.fail_with.append(VaultError("disk full"))
    assert (await post(channel, body, headers)).status == 503  # not taken: the click failed
    assert (await post(channel, body, headers)).status == 200
    assert [i.text for i in await inbox.wait(1)] == ["/use 1"]
    bad = action_body({**use, "value": "rm -rf"})  # not a command: kept as rejected, acked
    assert (await post(channel, bad, signed_headers(bad, content_type=FORM))).status == 200
    assert [r.reason for r in inbox.rejected] == ["untranslatable button (ValueError)"]


async def test_buttons_are_block_kit_under_the_last_chunk(fake: FakeSlackAPI) -> None:
    rows = ((Button(label="Use 1", payload="/use 1"),),)
    text = ("a" * 3900) + "\n\n" + ("b" * 100)
    async with make_channel(fake) as channel:
        await channel.send(Outbound(chat=ChatRef(channel="slack", chat_id="D1"), text=text,
                                    idempotency_key="k", buttons=rows))  # fmt: skip
    first, last = fake.posts
    assert buttons_of(first) == []
    assert [(b["value"], b["action_id"]) for b in buttons_of(last)] == [("/use 1", "iris_button_1")]
    assert (
        last["blocks"][0]["text"]["text"] == last["text"]
    )  # the text is shown, not only a fallback


async def test_no_warning_about_the_token_bolt_reads_from_the_environment(
    fake: FakeSlackAPI, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)  # where `iris run` keeps it, Bolt too
    with caplog.at_level(logging.WARNING):
        make_channel(fake)
    assert [r.getMessage() for r in caplog.records] == []
