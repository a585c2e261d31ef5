"""Pure translations between Telegram and Iris: `Update` -> `Inbound`, reply text -> chunks.

No I/O here, so every rule about what Iris answers on Telegram is unit-testable with a dict:
DMs always; in groups only when addressed — an `@mention` of the bot, a `text_mention` of it,
a reply to one of its messages, or `/cmd@bot`; forum topics are separate chats
(`message_thread_id`). Messages from bots and channel posts are ignored.
A press on one of our inline keyboard buttons (a callback query) becomes an ordinary `Inbound`
whose text is the button's payload (a command such as `/use 2`), addressed to the bot and
marked by its `telegram:callback:<id>` dedupe key: auth and the commands treat it like typing.
"""

from __future__ import annotations

from dataclasses import dataclass

from telegram import (
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    Update,
)

from gateway.core.formatting import split_text, to_plain, to_telegram_html, utf16_len
from gateway.core.messages import (
    Button,
    ChatKind,
    ChatRef,
    Inbound,
    UserRef,
    with_attachment,
)

CHANNEL = "telegram"
# Telegram's limit is 4096 characters after entity parsing, counted in UTF-16 code units.
MAX_MESSAGE_UTF16 = 4096
GROUP_TYPES = frozenset({"group", "supergroup"})
# Telegram's limit for a button's callback_data, in bytes.
MAX_CALLBACK_DATA = 64


@dataclass(frozen=True, slots=True)
class BotIdentity:
    user_id: int
    username: str


def update_to_inbound(update: Update, me: BotIdentity, *, now_ms: int = 0) -> Inbound | None:
    """The `Inbound` for a message update or a button press, or None if Iris should not see it
    at all; ValueError for a press that cannot be one of ours."""
    if update.callback_query is not None:
        return callback_to_inbound(update.update_id, update.callback_query, now_ms)
    message = update.message
    if message is None or message.from_user is None or message.from_user.is_bot:
        return None
    chat_type = message.chat.type
    if chat_type != "private" and chat_type not in GROUP_TYPES:
        return None
    text = message.text or message.caption or ""
    mentioned = _mentions_bot(message, me)
    user = message.from_user
    thread = str(message.message_thread_id) if message.is_topic_message else None
    text = _strip_mention(text, me) if mentioned else text
    return Inbound(
        chat=ChatRef(channel=CHANNEL, chat_id=str(message.chat.id), thread_id=thread),
        user=UserRef(channel=CHANNEL, user_id=str(user.id), display_name=user.full_name),
        text=text if message.text is not None else with_attachment(text, _attached(message)),
        message_id=str(message.message_id),
        kind=ChatKind.DM if chat_type == "private" else ChatKind.GROUP,
        mentioned=mentioned,
        reply_to_bot=_replies_to_bot(message, me),
        at_ms=int(message.date.timestamp() * 1000),
        dedupe_keys=(f"telegram:update:{update.update_id}",),
    )


# What a message may carry besides its caption (an animation is also a `document`: first).
_ATTACHMENTS = (
    ("photo", "a photo"),
    ("video", "a video"),
    ("video_note", "a video message"),
    ("animation", "an animation"),
    ("audio", "an audio file"),
    ("voice", "a voice message"),
    ("document", "a file"),
)


def _attached(message: Message) -> str | None:
    return next((what for attr, what in _ATTACHMENTS if getattr(message, attr, None)), None)


def callback_to_inbound(update_id: int, query: CallbackQuery, now_ms: int) -> Inbound | None:
    """A button press as the command its payload names, in the chat of the pressed message."""
    user, message = query.from_user, query.message
    if user.is_bot or message is None:  # presses on inline-mode messages: not ours
        return None
    if not isinstance(message, Message):  # too old to read: its topic is unknown
        raise ValueError("button on an inaccessible message")
    data = query.data or ""
    if not data.startswith("/") or len(data.encode()) > MAX_CALLBACK_DATA:
        raise ValueError("button payload is not a command")
    chat_type = message.chat.type
    if chat_type != "private" and chat_type not in GROUP_TYPES:
        return None
    thread = str(message.message_thread_id) if message.is_topic_message else None
    return Inbound(
        chat=ChatRef(channel=CHANNEL, chat_id=str(message.chat.id), thread_id=thread),
        user=UserRef(channel=CHANNEL, user_id=str(user.id), display_name=user.full_name),
        text=data,
        message_id=f"callback:{query.id}",  # not a message: never quoted in the answer
        kind=ChatKind.DM if chat_type == "private" else ChatKind.GROUP,
        mentioned=True,  # a press on the bot's own message addresses the bot
        reply_to_bot=True,
        at_ms=now_ms,
        dedupe_keys=(f"telegram:update:{update_id}", f"telegram:callback:{query.id}"),
    )


def keyboard(rows: tuple[tuple[Button, ...], ...]) -> InlineKeyboardMarkup | None:
    """An inline keyboard for an `Outbound`'s buttons (payloads too long for Telegram are left
    out: the message's text says how to type the same)."""
    markup = [
        [
            InlineKeyboardButton(b.label, callback_data=b.payload)
            for b in row
            if len(b.payload.encode()) <= MAX_CALLBACK_DATA
        ]
        for row in rows
    ]
    markup = [row for row in markup if row]
    return InlineKeyboardMarkup(markup) if markup else None


def _mentions_bot(message: Message, me: BotIdentity) -> bool:
    handle = f"@{me.username}".lower()
    types: list[str | None] = [
        MessageEntity.MENTION,
        MessageEntity.TEXT_MENTION,
        MessageEntity.BOT_COMMAND,
    ]
    parsed = (
        message.parse_entities(types) if message.text else message.parse_caption_entities(types)
    )
    for entity, fragment in parsed.items():
        if entity.type == MessageEntity.MENTION and fragment.lower() == handle:
            return True
        if (
            entity.type == MessageEntity.TEXT_MENTION
            and entity.user
            and entity.user.id == me.user_id
        ):
            return True
        if entity.type == MessageEntity.BOT_COMMAND and fragment.lower().endswith(handle):
            return True
    return False


def _replies_to_bot(message: Message, me: BotIdentity) -> bool:
    replied = message.reply_to_message
    # In forum topics every message "replies" to the topic's service message; that is no reply.
    if replied is None or replied.forum_topic_created is not None:
        return False
    return replied.from_user is not None and replied.from_user.id == me.user_id


def _strip_mention(text: str, me: BotIdentity) -> str:
    """Drop a leading `@bot` so the model sees the question, not the address."""
    handle = f"@{me.username}"
    stripped = text.lstrip()
    if stripped.lower().startswith(handle.lower()):
        rest = stripped[len(handle) :]
        if not rest or not (rest[0].isalnum() or rest[0] == "_"):
            return rest.lstrip(" ,:")
    return text


def reply_chunks(markdown: str) -> list[tuple[str, str]]:
    """(HTML, plain-text fallback) per message: split on the UTF-16 budget first, then format."""
    return [
        (to_telegram_html(chunk), to_plain(chunk))
        for chunk in split_text(markdown, MAX_MESSAGE_UTF16, utf16_len)
    ]
