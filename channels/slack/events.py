"""Pure translations between Slack and Iris: event and slash-command payloads -> `Inbound`,
reply text -> mrkdwn chunks.

What Iris sees on Slack: DMs (`message` with `channel_type: im`) and messages that mention it
in channels (`app_mention`, or a `message` that contains `<@bot>`). Channel conversations live
in threads: a mention starts (or continues) the thread of the message it was posted in.
Messages from any bot, our own, and edits/deletions/joins (subtyped messages) are dropped.
Every delivery carries two dedupe keys — the envelope's `event_id` (Slack retries) and
(channel, ts), which the `message` + `app_mention` pair of one message share.

The slash command `/iris clear now` becomes the text `/clear now`, so commands have one
implementation for every channel; a bare `/iris` asks for help.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.core.formatting import split_text, to_mrkdwn
from gateway.core.messages import ChatKind, ChatRef, Inbound, UserRef

CHANNEL = "slack"
# Slack truncates long messages and recommends at most 4,000 characters per message.
MAX_MESSAGE_CHARS = 4000
# Plain messages and the few subtypes that are still a person writing.
_WRITTEN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    user_id: str  # the bot user (what `<@...>` mentions use)
    bot_id: str


_LINK = re.compile(r"<((?:https?|mailto|tel):[^|>]+)(?:\|([^>]+))?>")
_CHANNEL_REF = re.compile(r"<#(\w+)(?:\|([^>]*))?>")


def _link(match: re.Match[str]) -> str:
    url, label = match.group(1), match.group(2)
    if not label or label in url:  # Slack's auto-link of "example.com" or an address
        return label or url
    return f"{label} ({url})"


def unescape(text: str) -> str:
    """Slack's message markup to what the person typed: links, #channels, `& < >`."""
    text = _LINK.sub(_link, text)
    text = _CHANNEL_REF.sub(lambda m: f"#{m.group(2) or m.group(1)}", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def event_to_inbound(body: dict[str, Any], me: SlackIdentity) -> Inbound | None:
    """The `Inbound` for an Events API envelope, or None if Iris should ignore it."""
    event = body.get("event")
    if not isinstance(event, dict) or event.get("type") not in ("message", "app_mention"):
        return None
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if event.get("bot_id") or not user or user == me.user_id or not channel or not ts:
        return None
    if event["type"] == "message" and event.get("subtype") not in _WRITTEN_SUBTYPES:
        return None
    raw = str(event.get("text") or "")
    tag = f"<@{me.user_id}>"
    is_dm = event.get("channel_type") == "im"
    thread_ts = event.get("thread_ts")
    thread = (str(thread_ts) if thread_ts else None) if is_dm else str(thread_ts or ts)
    keys = [f"slack:ts:{channel}:{ts}"]
    if body.get("event_id"):
        keys.insert(0, f"slack:event:{body['event_id']}")
    return Inbound(
        chat=ChatRef(channel=CHANNEL, chat_id=str(channel), thread_id=thread),
        user=UserRef(channel=CHANNEL, user_id=str(user)),
        text=unescape(" ".join(raw.replace(tag, " ").split()) if tag in raw else raw),
        message_id=str(ts),
        kind=ChatKind.DM if is_dm else ChatKind.GROUP,
        mentioned=event["type"] == "app_mention" or tag in raw,
        at_ms=_ts_ms(str(ts)),
        dedupe_keys=tuple(keys),
    )


def command_to_inbound(payload: dict[str, Any]) -> Inbound | None:
    """`/iris clear` -> an `Inbound` with text `/clear`; None if the payload is incomplete."""
    channel, user, trigger = (
        payload.get("channel_id"),
        payload.get("user_id"),
        payload.get("trigger_id"),
    )
    if not channel or not user or not trigger:
        return None
    words = " ".join(str(payload.get("text") or "").split())
    text = "/help" if not words else words if words.startswith("/") else f"/{words}"
    is_dm = str(channel).startswith("D")
    return Inbound(
        chat=ChatRef(channel=CHANNEL, chat_id=str(channel)),
        user=UserRef(channel=CHANNEL, user_id=str(user)),
        text=text,
        message_id=f"cmd-{trigger}",
        kind=ChatKind.DM if is_dm else ChatKind.GROUP,
        # A slash command is addressed to the bot by definition.
        mentioned=True,
        dedupe_keys=(f"slack:command:{trigger}",),
    )


def reply_chunks(markdown: str) -> list[str]:
    """mrkdwn messages of at most 4,000 characters, measured after formatting."""
    return [
        to_mrkdwn(chunk)
        for chunk in split_text(markdown, MAX_MESSAGE_CHARS, lambda c: len(to_mrkdwn(c)))
    ]


def _ts_ms(ts: str) -> int:
    try:
        return int(float(ts) * 1000)
    except ValueError:
        return 0
