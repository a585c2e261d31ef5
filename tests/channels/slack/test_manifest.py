"""The Slack manifest against the channel as it is: the listeners it registers with Bolt and the
Web API methods it calls. Adding a listener or an API call without updating the manifest (or
the reverse) fails here."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

import channels.slack
from channels.slack import SlackChannel
from channels.slack.events import SlackIdentity, event_to_inbound
from channels.slack.manifest import manifest

# From Slack's documentation, kept here apart from the code under test: the scope each event
# subscription requires, and the bot scopes of each Web API method (slack_sdk's names).
DOCUMENTED_EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
    "reaction_added": "reactions:read",
    "member_joined_channel": "channels:read",
    "app_home_opened": "",
}
DOCUMENTED_METHOD_SCOPES: dict[str, set[str]] = {
    "auth_test": set(),
    "chat_postMessage": {"chat:write"},
    "chat_postEphemeral": {"chat:write"},
    "chat_update": {"chat:write"},
    "chat_delete": {"chat:write"},
    "reactions_add": {"reactions:write"},
    "users_info": {"users:read"},
    "conversations_open": {"im:write"},
    "conversations_info": {"channels:read", "groups:read", "im:read", "mpim:read"},
    "files_upload_v2": {"files:write"},
}
CHANNEL_TYPES = {"channels": "channel", "groups": "group", "im": "im", "mpim": "mpim"}


def channel() -> SlackChannel:
    return SlackChannel(bot_token="xoxb-test", mode="http", signing_secret="s", command="/iris")


def event_body(subscription: str) -> dict[str, Any]:
    kind, _, where = subscription.partition(".")
    event = {"type": kind, "user": "U1", "channel": "C1", "ts": "1.0", "text": "hi"}
    if where:
        event["channel_type"] = CHANNEL_TYPES[where]
    return {"type": "event_callback", "team_id": "T1", "event": event, "event_id": "Ev1"}


def request(body: dict[str, Any]) -> AsyncBoltRequest:
    return AsyncBoltRequest(body=json.dumps(body), headers={"content-type": ["application/json"]})


async def first_listener(ch: SlackChannel, req: AsyncBoltRequest) -> str | None:
    for listener in ch._app._async_listeners:
        if await listener.async_matches(req=req, resp=BoltResponse(status=200)):
            return str(listener.ack_function.__name__)
    return None


def called_methods() -> set[str]:
    """Every `<...>client.<method>(...)` call in the channel package's source."""
    found = set()
    for path in Path(channels.slack.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute | ast.Name)
                and (getattr(node.func.value, "attr", "") or getattr(node.func.value, "id", ""))
                in ("_client", "client")
            ):
                found.add(node.func.attr)
    return found


async def test_every_manifest_event_reaches_the_message_listener_and_back() -> None:
    ch = channel()
    subscribed = manifest(name="Iris", command="/iris", mode="socket")["settings"][
        "event_subscriptions"
    ]["bot_events"]
    for subscription in subscribed:
        assert await first_listener(ch, request(event_body(subscription))) == "_on_event", (
            subscription
        )
    handled = [
        listener
        for listener in ch._app._async_listeners
        if listener.ack_function.__name__ == "_on_event"
    ]
    assert handled
    for listener in handled:  # every real listener is subscribed to in the manifest
        matches = [
            s
            for s in subscribed
            if await listener.async_matches(
                req=request(event_body(s)), resp=BoltResponse(status=200)
            )
        ]
        assert matches, "a Slack event listener has no subscription in channels/slack/manifest.py"
    me = SlackIdentity(user_id="UBOT", bot_id="BBOT")
    for subscription in subscribed:  # and the translation makes a message of each of them
        body = event_body(subscription)
        body["event"]["text"] = "<@UBOT> hi"
        assert event_to_inbound(body, me) is not None, subscription
    for other in set(DOCUMENTED_EVENT_SCOPES) - set(subscribed):  # acked only, not handled
        assert await first_listener(ch, request(event_body(other))) != "_on_event", other


async def test_the_command_and_interactivity_match_the_listeners() -> None:
    ch = channel()
    built = manifest(name="Iris", command="/iris", mode="socket")
    [slash] = built["features"]["slash_commands"]
    form = urlencode({"command": slash["command"], "text": "help", "user_id": "U1"})
    command = AsyncBoltRequest(
        body=form, headers={"content-type": ["application/x-www-form-urlencoded"]}
    )
    assert await first_listener(ch, command) == "_on_command"
    payload = {"type": "block_actions", "actions": [{"action_id": "x"}], "user": {"id": "U1"}}
    button = AsyncBoltRequest(
        body=urlencode({"payload": json.dumps(payload)}),
        headers={"content-type": ["application/x-www-form-urlencoded"]},
    )
    assert await first_listener(ch, button) is not None
    ours = {**payload, "actions": [{"action_id": "iris_button_1", "value": "/use 1"}]}
    use = AsyncBoltRequest(
        body=urlencode({"payload": json.dumps(ours)}),
        headers={"content-type": ["application/x-www-form-urlencoded"]},
    )
    assert await first_listener(ch, use) == "_on_button"  # Use / Dismiss under suggestions
    assert built["settings"]["interactivity"]["is_enabled"] is True


def test_scopes_are_exactly_what_the_events_calls_and_command_need() -> None:
    built = manifest(name="Iris", command="/iris", mode="socket")
    calls = called_methods()
    unknown = calls - set(DOCUMENTED_METHOD_SCOPES)
    assert not unknown, f"add the bot scopes of {unknown} here and in the manifest"
    needed = {"commands"}
    for method in calls:
        needed |= DOCUMENTED_METHOD_SCOPES[method]
    for event in built["settings"]["event_subscriptions"]["bot_events"]:
        needed.add(DOCUMENTED_EVENT_SCOPES[event])
    assert set(built["oauth_config"]["scopes"]["bot"]) == needed
    assert "chat_postMessage" in calls  # the scan sees the channel's calls at all


def test_socket_and_http_modes() -> None:
    socket = manifest(name="Iris", command="/iris", mode="socket")
    assert socket["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in socket["settings"]["event_subscriptions"]
    http = manifest(name="Ask", command="/ask", mode="http", url="https://iris.example.com/")
    url = "https://iris.example.com/slack/events"
    assert http["settings"]["socket_mode_enabled"] is False
    assert http["settings"]["event_subscriptions"]["request_url"] == url
    assert http["settings"]["interactivity"]["request_url"] == url
    assert http["features"]["slash_commands"][0] == {
        **http["features"]["slash_commands"][0],
        "command": "/ask",
        "url": url,
    }
    with pytest.raises(ValueError, match="https://"):
        manifest(name="Iris", command="/iris", mode="http", url="http://insecure")
