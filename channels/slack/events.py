"""Pure translations between Slack and Iris: event and slash-command payloads -> `Inbound`,
reply text -> mrkdwn chunks.

What Iris sees on Slack: DMs (`message` with `channel_type: im`) and messages that mention it
in channels (`app_mention`, or a `message` that contains `<@bot>`). Channel conversations live
in threads: a mention starts (or continues) the thread of the message it was posted in.
Messages from any bot, our own, and edits/deletions/joins (subtyped messages) are dropped.
Every delivery carries two dedupe keys — the envelope's `event_id` (Slack retries) and
(channel, ts), which the `message` + `app_mention` pair of one message share.

The slash command `/iris clear now` becomes the text `/clear now`, so commands have one
implementation for every channel; a bare `/iris` asks for help. Likewise a click on one of our
Block Kit buttons (`block_actions`) becomes the command in its value (`/use 2`), addressed to
the bot, in the conversation (and thread) of the clicked message, marked by its
`slack:action:<trigger_id>` dedupe key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.core.formatting import split_text, to_mrkdwn
from gateway.core.messages import (
    Button,
    ChatKind,
    ChatRef,
    Inbound,
    UserRef,
    with_attachment,
)

CHANNEL = "slack"
# Slack truncates long messages and recommends at most 4,000 characters per message.
MAX_MESSAGE_CHARS = 4000
# Our buttons' action_ids (Slack wants them unique within a message): the prefix, then a number.
BUTTON_ACTION = re.compile(r"^iris_button_\d+$")
# Block Kit limits: a section's text, a button's value, elements of one actions block.
MAX_SECTION_CHARS = 3000
MAX_BUTTON_VALUE = 2000
MAX_ACTIONS = 25
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
    text = unescape(" ".join(raw.replace(tag, " ").split()) if tag in raw else raw)
    return Inbound(
        chat=ChatRef(channel=CHANNEL, chat_id=str(channel), thread_id=thread),
        user=UserRef(channel=CHANNEL, user_id=str(user)),
        text=with_attachment(text, _files(event.get("files"))),
        message_id=str(ts),
        kind=ChatKind.DM if is_dm else ChatKind.GROUP,
        mentioned=event["type"] == "app_mention" or tag in raw,
        at_ms=_ts_ms(str(ts)),
        dedupe_keys=tuple(keys),
    )


def _files(files: object) -> str | None:
    """What the message's files are, for the note in front of its text (None: no file)."""
    if not isinstance(files, list) or not files:
        return None
    names = [str(f.get("name") or "")[:80] for f in files if isinstance(f, dict)]
    named = ", ".join(n for n in names if n)
    what = "a file" if len(files) == 1 else f"{len(files)} files"
    return f"{what}: {named}" if named else what


COMMAND_PREFIX = "cmd-"


def command_user(message_id: str) -> str | None:
    """The user who typed the slash command `message_id` is from (None: not a command, or a
    command saved before the user was in its id)."""
    if not message_id.startswith(COMMAND_PREFIX):
        return None
    user, sep, _ = message_id.removeprefix(COMMAND_PREFIX).partition(":")
    return user if sep and user else None


# Commands about one conversation. In a channel each conversation is a thread, and a slash
# command carries no thread: it would act on an empty conversation of the channel itself.
THREAD_COMMANDS = frozenset({"clear", "compact", "context", "use", "dismiss"})


def thread_only(inbound: Inbound, me: SlackIdentity | None) -> str | None:
    """What to answer instead of running a slash command that needs a thread, typed in a
    channel (None: run it)."""
    name = inbound.text.removeprefix("/").split(" ", 1)[0].lower()
    if inbound.kind is not ChatKind.GROUP or name not in THREAD_COMMANDS:
        return None
    mention = f"<@{me.user_id}>" if me is not None else "@ me"
    return (
        f"In a channel, each conversation with me is a thread, and a slash command can't say "
        f"which one. Write it in the thread itself: {mention} /{name}"
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
        # The user is in it: a reply whose responder is gone (a restart) is shown to them alone.
        message_id=f"{COMMAND_PREFIX}{user}:{trigger}",
        kind=ChatKind.DM if is_dm else ChatKind.GROUP,
        # A slash command is addressed to the bot by definition.
        mentioned=True,
        dedupe_keys=(f"slack:command:{trigger}",),
    )


def action_to_inbound(payload: dict[str, Any]) -> Inbound | None:
    """A click on one of our buttons -> the command it carries; None if it is not one of
    ours; ValueError if its value is not a command."""
    actions, user, where = payload.get("actions"), payload.get("user"), payload.get("channel")
    trigger = payload.get("trigger_id")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return None
    if not isinstance(user, dict) or not isinstance(where, dict) or not trigger:
        return None
    action = actions[0]
    if not BUTTON_ACTION.match(str(action.get("action_id", ""))):
        return None
    value = str(action.get("value") or "")
    if not value.startswith("/") or len(value) > MAX_BUTTON_VALUE:
        raise ValueError("button value is not a command")
    channel = str(where.get("id") or "")
    container = payload.get("container")
    thread_ts = container.get("thread_ts") if isinstance(container, dict) else None
    is_dm = channel.startswith("D")
    return Inbound(
        chat=ChatRef(channel=CHANNEL, chat_id=channel,
                     thread_id=str(thread_ts) if thread_ts else None),
        user=UserRef(channel=CHANNEL, user_id=str(user.get("id") or "")),
        text=value,
        message_id=f"action-{trigger}",
        kind=ChatKind.DM if is_dm else ChatKind.GROUP,
        mentioned=True,  # a click on the bot's own message addresses the bot
        reply_to_bot=True,
        at_ms=_ts_ms(str(action.get("action_ts") or "")),
        dedupe_keys=(f"slack:action:{trigger}",),
    )  # fmt: skip


def button_blocks(text: str, rows: tuple[tuple[Button, ...], ...]) -> list[dict[str, Any]] | None:
    """Block Kit for a message with buttons: its text as a section, then one actions block per
    row; None when the text or the buttons do not fit (the text says how to type the same)."""
    if not rows or len(text) > MAX_SECTION_CHARS:
        return None
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    number = 0
    for row in rows:
        elements = []
        for b in row[:MAX_ACTIONS]:
            if len(b.payload) > MAX_BUTTON_VALUE:
                continue
            number += 1
            elements.append({
                "type": "button",
                "text": {"type": "plain_text", "text": b.label[:75]},
                "action_id": f"iris_button_{number}",
                "value": b.payload,
            })  # fmt: skip
        if elements:
            blocks.append({"type": "actions", "elements": elements})
    return blocks if len(blocks) > 1 else None


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
