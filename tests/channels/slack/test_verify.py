"""Bad requests into /slack/events are 4xx, never a 500 or a traceback: the checks of
`channels/slack/verify.py` alone, then through our real aiohttp server and real Bolt, and a
seeded fuzzer of signed payloads of every shape."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channels.slack import SlackChannel
from channels.slack.verify import MAX_DEPTH, Rejected, check_payload, check_signature
from gateway.admin.http import HttpServer
from tests.fakes import Inbox
from tests.fakes.slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    command_body,
    dm_event,
    event_body,
    running_fake_slack,
    signed_headers,
)

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
NOW = 1_767_225_600.0


def sign(body: bytes, *, at: float = NOW, secret: str = SIGNING_SECRET) -> dict[str, str]:
    ts = str(int(at))
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": ts, "x-slack-signature": f"v0={digest}"}


def rejected(status: int, call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(Rejected) as caught:
        call(*args, **kwargs)
    assert caught.value.status == status
    return caught.value.reason


# --- the checks alone ---------------------------------------------------------------------


def test_a_signed_request_within_five_minutes_passes() -> None:
    for skew in (-300, 0, 300):
        check_signature(sign(b"{}", at=NOW + skew), b"{}", secret=SIGNING_SECRET, now_s=NOW)


@pytest.mark.parametrize(
    "timestamp",
    ["", "abc", "1e9", "-5", " 1767225600", "1767225600.5", "１７６７２２５６００", "9" * 40],
)
def test_a_missing_or_non_numeric_timestamp_is_401(timestamp: str) -> None:
    headers = {**sign(b"{}"), "x-slack-request-timestamp": timestamp}
    reason = rejected(401, check_signature, headers, b"{}", secret=SIGNING_SECRET, now_s=NOW)
    assert "non-numeric" in reason


def test_stale_future_forged_and_unsigned_requests_are_401() -> None:
    body = b'{"type": "url_verification", "challenge": "c"}'
    cases = {
        "stale": sign(body, at=NOW - 301),
        "future": sign(body, at=NOW + 301),
        "forged": sign(body, secret="not-the-secret"),
        "other body": sign(b"{}"),
        "no signature": {"x-slack-request-timestamp": str(int(NOW))},
        "non-ascii signature": {**sign(body), "x-slack-signature": "v0=é"},
        "nothing": {},
    }
    for name, headers in cases.items():
        with pytest.raises(Rejected) as caught:
            check_signature(headers, body, secret=SIGNING_SECRET, now_s=NOW)
        assert caught.value.status == 401, name


@pytest.mark.parametrize(
    ("body", "content_type", "needle"),
    [
        (b"\xff\xfe{}", JSON, "UTF-8"),
        (b"{not json", JSON, "not valid JSON"),
        (b"[1, 2]", JSON, "not an object"),
        (b'"text"', JSON, "not an object"),
        (b"", JSON, "not valid JSON"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), JSON, "nested deeper"),
        (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, JSON, "nested deeper"),
        (b"a=%ZZ&&&b", FORM, "form encoding"),
        (b"command=%FF%FE", FORM, "form encoding"),
        (b"payload=%7Bbad", FORM, "not valid JSON"),
        (b'{"a": NaN}', JSON, "not valid JSON"),
        (b'{"text": "\\ud800"}', JSON, "surrogate"),
        (b"payload=%5B1%5D", FORM, "not an object"),
        (b"text=hello", FORM, "neither"),
        (b'{"token": "x"}', JSON, "neither"),
        (b'{"type": 5}', JSON, "type is not a string"),
        (b'{"type": "event_callback"}', JSON, "without an event type"),
        (b'{"type": "event_callback", "event": "x"}', JSON, "event is not an object"),
        (b'{"type": "event_callback", "event": null}', JSON, "event is not an object"),
        (b'{"type": "event_callback", "event": {"type": 5}}', JSON, "event.type"),
        (b'{"type": "event_callback", "event": {"type": "message", "text": {}}}', JSON, "text"),
        (b'{"type": "event_callback", "event": {"type": "x", "ts": "inf"}}', JSON, "timestamp"),
        (b'{"type": "event_callback", "event": {"type": "x", "user": [1]}}', JSON, "event.user"),
        (b'{"type": "x", "team": {"id": 5}}', JSON, "team.id"),
        (b'{"type": "x", "authorizations": "a"}', JSON, "list of objects"),
        (b'{"type": "x", "response_urls": [1]}', JSON, "list of objects"),
        (b'{"type": "url_verification"}', JSON, "challenge"),
        (b'{"type": "block_actions", "actions": []}', JSON, "action ids"),
        (b'{"type": "block_actions", "actions": [{"block_id": "b"}]}', JSON, "action ids"),
        (b'{"type": "block_suggestion"}', JSON, "action_id"),
        (b'{"type": "view_submission", "view": {}}', JSON, "callback_id"),
        (b'{"type": "view_submission", "view": {"callback_id": "c"}}', JSON, "view type"),
        (b'{"type": "shortcut"}', JSON, "callback_id"),
        (b'{"command": 5}', JSON, "command is not a string"),
    ],
)
def test_signed_but_malformed_bodies_are_400(body: bytes, content_type: str, needle: str) -> None:
    assert needle in rejected(400, check_payload, body, content_type)


def test_what_slack_sends_passes() -> None:
    event = event_body(dm_event("hi"))
    assert check_payload(event.encode(), JSON) == event
    assert check_payload(event.encode(), None) == event  # a body starting with { is JSON
    check_payload(command_body("clear", response_url="http://x/r").encode(), FORM)
    check_payload(b"ssl_check=1&token=x", FORM)
    action = {
        "type": "block_actions",
        "user": {"id": "U1", "team_id": "T1"},
        "team": {"id": "T1", "domain": "d"},
        "enterprise": None,
        "channel": {"id": "C1", "name": "general"},
        "message": {"type": "message", "ts": "1767225600.000100", "blocks": [{"text": {}}]},
        "actions": [{"action_id": "a", "block_id": "b", "text": {"type": "plain_text"}}],
    }
    check_payload(f"payload={quote(json.dumps(action))}".encode(), FORM)


# --- through the real HTTP server and Bolt ------------------------------------------------


@dataclass
class Served:
    base: str
    inbox: Inbox
    session: aiohttp.ClientSession

    async def post(self, body: bytes | str, headers: dict[str, str]) -> tuple[int, str]:
        data = body.encode() if isinstance(body, str) else body
        async with self.session.post(
            f"{self.base}/slack/events", data=data, headers=headers
        ) as response:
            return response.status, await response.text()

    async def post_signed(self, body: bytes | str, content_type: str = JSON) -> tuple[int, str]:
        data = body.encode() if isinstance(body, str) else body
        return await self.post(data, {**sign(data, at=time.time()), "content-type": content_type})


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with running_fake_slack() as api:
        inbox = Inbox()
        channel = SlackChannel(
            bot_token=BOT_TOKEN,
            mode="http",
            signing_secret=SIGNING_SECRET,
            api_url=f"{api.url}/api/",
        )
        server = HttpServer(host="127.0.0.1", port=0)
        for route in channel.routes():
            server.add_route(route)
        async with channel, server, aiohttp.ClientSession() as session:
            task = asyncio.create_task(channel.run(inbox))
            try:
                await asyncio.wait_for(channel.started.wait(), 5)
                yield Served(f"http://127.0.0.1:{server.port}", inbox, session)
            finally:
                task.cancel()
                await asyncio.wait([task])


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert loud == [], [r.getMessage() for r in loud]


async def test_bad_headers_are_401_before_anything_is_parsed(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = "{not even json"
    for timestamp in ("abc", "", "1e9", "9" * 40):
        headers = {**signed_headers(body, content_type=JSON)}
        headers["x-slack-request-timestamp"] = timestamp
        status, text = await served.post(body, headers)
        assert (status, json.loads(text)) == (401, {"error": "invalid request"})
    stale = signed_headers(body, at=time.time() - 600, content_type=JSON)
    forged = signed_headers(body, secret="wrong", content_type=JSON)
    for headers in (stale, forged, {"content-type": JSON}):
        assert (await served.post(body, headers))[0] == 401
    no_tracebacks(caplog)
    # An unauthenticated sender gets nothing above a debug line into the log.
    assert [r for r in caplog.records if r.levelno > logging.DEBUG] == []
    assert served.inbox.items == []


async def test_signed_malformed_bodies_are_400_and_nothing_runs(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    bodies: list[tuple[bytes | str, str]] = [
        ("{not json", JSON),
        ("[1, 2]", JSON),
        (b"\xff\xfe{}", JSON),
        ("[" * 5000 + "]" * 5000, JSON),
        ('{"type": "event_callback", "event": "x"}', JSON),
        ('{"type": "block_actions", "actions": [1]}', JSON),
        ("payload=%7Bbad", FORM),
        ("a=%ZZ&&&b", FORM),
        (urlencode({"payload": json.dumps({"type": "shortcut", "callback_id": 5})}), FORM),
    ]
    for body, content_type in bodies:
        status, text = await served.post_signed(body, content_type)
        assert (status, json.loads(text)) == (400, {"error": "malformed request"}), body
    no_tracebacks(caplog)
    assert served.inbox.items == []
    assert served.inbox.rejected == []
    # The route still works afterwards.
    ok = event_body(dm_event("real"))
    assert (await served.post_signed(ok))[0] == 200
    assert [i.text for i in await served.inbox.wait(1)] == ["real"]


# Envelopes from the keys Slack payloads use, with values of any JSON type (right or wrong).
_KEYS = [
    "type", "event", "user", "channel", "team", "enterprise", "ts", "thread_ts", "text",
    "subtype", "channel_type", "bot_id", "event_id", "authorizations", "actions", "view",
    "callback_id", "action_id", "command", "trigger_id", "response_url", "response_urls",
    "message", "previous_message", "item", "is_ext_shared_channel", "challenge", "user_id",
    "channel_id", "team_id", "function_data", "assistant_thread", "id", "block_id",
]  # fmt: skip
_TYPES = [
    "event_callback", "url_verification", "block_actions", "block_suggestion", "shortcut",
    "message_action", "view_submission", "view_closed", "interactive_message", "message",
    "app_mention", "reaction_added", "x",
]  # fmt: skip
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(["", "U1", "D1", "im", "1767225600.000100", "/iris", "inf", "1e999"]),
    st.sampled_from(_TYPES),
)


def _objects(values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(_KEYS), values, max_size=6)


_VALUES = st.recursive(
    _SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), _objects(inner)), max_leaves=12
)


@pytest.mark.anyio
@settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=_objects(_VALUES), as_form=st.booleans())
async def test_signed_payloads_of_any_shape_never_get_a_500(
    served: Served, caplog: pytest.LogCaptureFixture, payload: dict[str, Any], as_form: bool
) -> None:
    if as_form:
        body, content_type = urlencode({"payload": json.dumps(payload)}), FORM
    else:
        body, content_type = json.dumps(payload), JSON
    status, _ = await served.post_signed(body, content_type)
    assert status < 500, payload
    no_tracebacks(caplog)
    assert served.inbox.rejected == []  # what passes the checks always translates
