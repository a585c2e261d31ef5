"""The core value types that cross every boundary of the gateway.

Channel adapters translate platform events into these small frozen dataclasses at the edge, so
no SDK object (a PTB `Update`, a Slack event dict, an Anthropic block) ever reaches the router,
the agent or the vault. This module imports nothing from the project on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum


class ChatKind(StrEnum):
    DM = "dm"
    GROUP = "group"


class OutboundKind(StrEnum):
    REPLY = "reply"
    PROACTIVE = "proactive"
    NOTICE = "notice"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRef:
    """Where a conversation lives. `thread_id` separates forum topics and Slack threads."""

    channel: str
    chat_id: str
    thread_id: str | None = None

    @property
    def key(self) -> str:
        base = f"{self.channel}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base


@dataclass(frozen=True, slots=True, kw_only=True)
class UserRef:
    """Who: the platform's immutable id, never a display name."""

    channel: str
    user_id: str
    display_name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "display_name", storable(self.display_name))

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.user_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Inbound:
    """One message from a person, already translated from the platform's event."""

    chat: ChatRef
    user: UserRef
    text: str
    message_id: str
    kind: ChatKind = ChatKind.DM
    mentioned: bool = False
    reply_to_bot: bool = False
    at_ms: int = 0
    # Extra platform keys that identify the same delivery (e.g. Slack's event_id beside
    # channel+ts); the router dedupes on every one of them.
    dedupe_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", storable(self.text))


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD. JSON may carry one (`"\\ud800"`,
    which Python decodes to a str no UTF-8 encoder takes): saved as it is, it would fail the
    vault's write, and a platform that redelivers would stop the whole stream on it."""
    if text.isascii():  # most messages: no surrogate can be there
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Button:
    """A button under a message. Pressing it comes back as an `Inbound` whose text is
    `payload` (a command such as `/use 2`), so auth, dedupe and the commands handle it."""

    label: str
    payload: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Outbound:
    """One message to send. `idempotency_key` makes a retry of the same send recognisable.

    `buttons` are rows of buttons shown under the message where the platform has them (the
    text must still say how to do the same by typing: other channels drop them)."""

    chat: ChatRef
    text: str
    idempotency_key: str
    reply_to: str | None = None
    kind: OutboundKind = OutboundKind.REPLY
    buttons: tuple[tuple[Button, ...], ...] = ()
    # Platform ids of the chunks of this text an earlier attempt delivered (a long reply cut
    # short by a rate limit, kept in its outbox row): the channel sends the rest only.
    sent_chunks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SentReceipt:
    """What the platform told us about a delivered message."""

    platform_message_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelHealth:
    """A channel's own view of its connection, shown by `GET /healthz`.

    `last_ok_ms` is the last proof the platform link works (a successful poll, an acked event).
    """

    channel: str
    connected: bool
    last_inbound_ms: int | None = None
    last_ok_ms: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class WebRequest:
    """An HTTP request handed to a route, free of web framework types; header names lower case."""

    method: str
    path: str
    headers: dict[str, str]
    query: str
    body: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class WebResponse:
    status: int = 200
    body: str = ""
    content_type: str = "text/plain"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandInfo:
    """A user command as a platform menu shows it (Telegram's setMyCommands)."""

    name: str
    summary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectedInbound:
    """A platform delivery the channel could not translate: kept with the reason, confirmed to
    the platform, never retried."""

    channel: str
    key: str
    reason: str
    raw: str = ""


# Iris reads text only: a photo captioned "what is this?" reaches the model with a note in
# front of the caption, so that it says it cannot see the photo rather than guess. A caption
# that is a command stays the command; a file without a caption has no text at all.
def with_attachment(text: str, what: str | None) -> str:
    """`text` (a caption) with a note that `what` ("a photo", "a file: notes.pdf") came with
    it and cannot be read here; `text` alone when nothing came, or it is empty or a command."""
    if what is None or not text.strip() or text.lstrip().startswith("/"):
        return text
    return f"[{what} came with this message, not readable here] {text}"
