"""Pure Slack translation: events and slash commands to `Inbound`, replies to mrkdwn chunks."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

import pytest

from channels.slack.events import (
    SlackIdentity,
    action_to_inbound,
    button_blocks,
    command_to_inbound,
    event_to_inbound,
    reply_chunks,
)
from gateway.core.messages import Button, ChatKind
from tests.fakes.slack import action_body

ME = SlackIdentity(user_id="UBOT", bot_id="BBOT")


def envelope(event: dict[str, Any], event_id: str = "Ev1") -> dict[str, Any]:
    return {"type": "event_callback", "event_id": event_id, "event": event}


def dm(**extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "channel": "D1",
        "channel_type": "im",
        "user": "U1",
        "text": "hi",
        "ts": "1767225600.000100",
        **extra,
    }


def test_dm_message() -> None:
    inbound = event_to_inbound(envelope(dm(text="a &lt; b &amp; c")), ME)
    assert inbound is not None
    assert inbound.kind is ChatKind.DM
    assert inbound.chat.key == "slack:D1"
    assert inbound.text == "a < b & c"
    assert inbound.dedupe_keys == ("slack:event:Ev1", "slack:ts:D1:1767225600.000100")
    assert inbound.at_ms == 1_767_225_600_000


def test_dm_thread_reply_is_its_own_session() -> None:
    inbound = event_to_inbound(envelope(dm(thread_ts="1767225000.000001")), ME)
    assert inbound is not None
    assert inbound.chat.thread_id == "1767225000.000001"


def test_app_mention_starts_a_thread_and_strips_the_mention() -> None:
    event = {
        "type": "app_mention",
        "channel": "C1",
        "user": "U1",
        "text": "<@UBOT> deploy?",
        "ts": "5.1",
    }
    inbound = event_to_inbound(envelope(event), ME)
    assert inbound is not None
    assert inbound.kind is ChatKind.GROUP
    assert inbound.mentioned
    assert inbound.text == "deploy?"
    assert inbound.chat.thread_id == "5.1"


def test_message_and_mention_of_one_post_share_a_dedupe_key() -> None:
    mention = {
        "type": "app_mention",
        "channel": "C1",
        "user": "U1",
        "text": "<@UBOT> x",
        "ts": "5.1",
    }
    message = {**mention, "type": "message", "channel_type": "channel"}
    a = event_to_inbound(envelope(mention, "EvA"), ME)
    b = event_to_inbound(envelope(message, "EvB"), ME)
    assert a is not None
    assert b is not None
    assert set(a.dedupe_keys) & set(b.dedupe_keys) == {"slack:ts:C1:5.1"}
    assert a.chat == b.chat
    assert a.mentioned
    assert b.mentioned


def test_channel_chatter_is_not_addressed() -> None:
    event = {
        "type": "message",
        "channel": "C1",
        "channel_type": "channel",
        "user": "U1",
        "text": "lunch",
        "ts": "5.2",
    }
    inbound = event_to_inbound(envelope(event), ME)
    assert inbound is not None
    assert not inbound.mentioned


def test_bots_ourselves_edits_and_other_events_are_ignored() -> None:
    assert event_to_inbound(envelope(dm(bot_id="B2")), ME) is None
    assert event_to_inbound(envelope(dm(user="UBOT")), ME) is None
    assert event_to_inbound(envelope(dm(subtype="message_changed")), ME) is None
    assert event_to_inbound(envelope(dm(subtype="channel_join")), ME) is None
    assert event_to_inbound(envelope({"type": "reaction_added", "user": "U1"}), ME) is None
    assert event_to_inbound({"type": "event_callback"}, ME) is None
    assert event_to_inbound(envelope(dm(subtype="file_share")), ME) is not None


def test_a_message_with_files_says_so_before_its_text() -> None:
    shared = dm(text="can you read this?", subtype="file_share", files=[{"name": "plan.pdf"}])
    inbound = event_to_inbound(envelope(shared), ME)
    assert inbound is not None
    assert (
        inbound.text
        == "[a file: plan.pdf came with this message, not readable here] can you read this?"
    )
    two = dm(text="both?", subtype="file_share", files=[{"name": "a.png"}, {"id": "F2"}])
    assert event_to_inbound(envelope(two), ME).text.startswith("[2 files: a.png came")  # type: ignore[union-attr]
    assert event_to_inbound(envelope(dm(text="hi", files=[])), ME).text == "hi"  # type: ignore[union-attr]


def test_slash_command_becomes_a_slash_text() -> None:
    payload = {
        "command": "/iris",
        "text": "  tz   Europe/Berlin ",
        "user_id": "U1",
        "channel_id": "D1",
        "trigger_id": "t1",
    }
    inbound = command_to_inbound(payload)
    assert inbound is not None
    assert inbound.text == "/tz Europe/Berlin"
    assert inbound.kind is ChatKind.DM
    assert inbound.mentioned
    assert inbound.dedupe_keys == ("slack:command:t1",)


def test_bare_slash_command_asks_for_help_and_incomplete_payload_is_dropped() -> None:
    base = {"user_id": "U1", "channel_id": "C1", "trigger_id": "t2"}
    assert command_to_inbound({**base, "text": ""}).text == "/help"  # type: ignore[union-attr]
    assert command_to_inbound({**base, "text": "/clear"}).text == "/clear"  # type: ignore[union-attr]
    assert command_to_inbound({"text": "clear"}) is None


def test_reply_chunks_fit_4000_characters_after_escaping() -> None:
    chunks = reply_chunks("a & b " * 2000)
    assert len(chunks) > 1
    assert all(len(c) <= 4000 for c in chunks)
    assert all("&amp;" in c for c in chunks)


def test_slack_markup_in_user_text_becomes_what_they_typed() -> None:
    raw = (
        "see <https://example.com|example.com>, <https://x.org/a|the docs> and "
        "<#C1|general> &amp; <mailto:a@b.co|a@b.co>"
    )
    inbound = event_to_inbound(envelope(dm(text=raw)), ME)
    assert inbound is not None
    assert inbound.text == "see example.com, the docs (https://x.org/a) and #general & a@b.co"


def click(value: str, **extra: Any) -> dict[str, Any]:
    button = {"action_id": "iris_button_1", "text": {"type": "plain_text", "text": "Use 1"}}
    form = parse_qs(action_body({**button, "value": value}, **extra))
    payload: dict[str, Any] = json.loads(form["payload"][0])
    return payload


def test_a_click_becomes_the_command_on_its_button() -> None:
    payload = click("/use 1", user="U1", channel="D1")
    inbound = action_to_inbound(payload)
    assert inbound is not None
    assert (inbound.text, inbound.kind, inbound.chat.key) == ("/use 1", ChatKind.DM, "slack:D1")
    assert inbound.user.key == "slack:U1"
    assert inbound.dedupe_keys == (f"slack:action:{payload['trigger_id']}",)


def test_a_click_in_a_channel_thread_is_addressed_to_the_bot_there() -> None:
    inbound = action_to_inbound(click("/dismiss 1", channel="C1", thread_ts="1.5"))
    assert inbound is not None
    assert inbound.kind is ChatKind.GROUP and inbound.mentioned
    assert inbound.chat.key == "slack:C1:1.5"


def test_clicks_that_are_not_ours_or_not_commands() -> None:
    other = click("/use 1")
    other["actions"][0]["action_id"] = "somebody_else"
    assert action_to_inbound(other) is None
    assert action_to_inbound({"type": "block_actions", "actions": []}) is None
    with pytest.raises(ValueError, match="not a command"):
        action_to_inbound(click("use 1"))


def test_button_blocks_and_their_limits() -> None:
    rows = (
        (Button(label="Use 1", payload="/use 1"), Button(label="Dismiss 1", payload="/dismiss 1")),
    )
    blocks = button_blocks("text", rows)
    assert blocks is not None
    assert blocks[0] == {"type": "section", "text": {"type": "mrkdwn", "text": "text"}}
    ids = [e["action_id"] for e in blocks[1]["elements"]]
    assert ids == ["iris_button_1", "iris_button_2"]  # unique within the message
    assert button_blocks("x" * 3001, rows) is None  # too long for a section: text only
    assert button_blocks("text", ()) is None
