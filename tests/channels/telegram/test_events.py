"""Pure Telegram translation: which updates Iris sees, and how replies are cut and formatted."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Update

from channels.telegram.events import BotIdentity, keyboard, reply_chunks, update_to_inbound
from gateway.core.formatting import utf16_len
from gateway.core.messages import Button, ChatKind, ChatRef
from tests.fakes.telegram import BOT_ID, BOT_USERNAME, callback_update, mention, message_update

ME = BotIdentity(user_id=BOT_ID, username=BOT_USERNAME)
GROUP = {"chat_id": -100, "chat_type": "supergroup"}


def translate(data: dict[str, Any]):  # type: ignore[no-untyped-def]
    return update_to_inbound(Update.de_json(data, None), ME)


def test_private_message_becomes_a_dm() -> None:
    data = message_update("hello", user_id=7, update_id=555, message_id=9)
    inbound = translate(data)
    assert inbound is not None
    assert inbound.kind is ChatKind.DM
    assert inbound.chat == ChatRef(channel="telegram", chat_id="7")
    assert inbound.user.key == "telegram:7"
    assert (inbound.text, inbound.message_id) == ("hello", "9")
    assert inbound.dedupe_keys == ("telegram:update:555",)
    assert inbound.at_ms == 1_767_225_600_000


def test_group_chatter_is_not_addressed() -> None:
    inbound = translate(message_update("lunch?", **GROUP))
    assert inbound is not None
    assert inbound.kind is ChatKind.GROUP
    assert not inbound.mentioned
    assert not inbound.reply_to_bot


def test_mention_addresses_the_bot_and_is_stripped() -> None:
    text = "@iris_bot, what is 2+2"
    inbound = translate(message_update(text, entities=mention(text), **GROUP))
    assert inbound is not None
    assert inbound.mentioned
    assert inbound.text == "what is 2+2"


def test_mention_of_someone_else_does_not_count() -> None:
    text = "@someone_else hi"
    inbound = translate(message_update(text, entities=mention(text, "@someone_else"), **GROUP))
    assert inbound is not None
    assert not inbound.mentioned


def test_text_mention_and_reply_and_command_address_the_bot() -> None:
    text_mention = [
        {
            "type": "text_mention",
            "offset": 0,
            "length": 4,
            "user": {"id": BOT_ID, "is_bot": True, "first_name": "Iris"},
        }
    ]
    assert translate(message_update("Iris hi", entities=text_mention, **GROUP)).mentioned  # type: ignore[union-attr]
    assert translate(message_update("thanks", reply_to_bot=True, **GROUP)).reply_to_bot  # type: ignore[union-attr]
    command = [{"type": "bot_command", "offset": 0, "length": 15}]
    assert translate(message_update("/clear@iris_bot", entities=command, **GROUP)).mentioned  # type: ignore[union-attr]
    plain = [{"type": "bot_command", "offset": 0, "length": 6}]
    assert not translate(message_update("/clear", entities=plain, **GROUP)).mentioned  # type: ignore[union-attr]


def test_forum_topics_are_separate_chats() -> None:
    inbound = translate(message_update("hi", thread_id=77, **GROUP))
    assert inbound is not None
    assert inbound.chat.thread_id == "77"
    assert inbound.chat.key == "telegram:-100:77"


def test_bots_and_channel_posts_are_ignored() -> None:
    assert translate(message_update("beep", from_bot=True)) is None
    assert translate(message_update("news", chat_id=-200, chat_type="channel")) is None
    assert translate({"update_id": 1, "edited_message": message_update("x")["message"]}) is None


def test_caption_counts_as_text_and_no_text_stays_empty() -> None:
    data = message_update("ignored")
    del data["message"]["text"]
    assert translate(data).text == ""  # type: ignore[union-attr]  # the router asks for text
    data["message"]["caption"] = "look at this"
    assert translate(data).text == "look at this"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("field", "value", "what"),
    [
        ("photo", [{"file_id": "p", "file_unique_id": "p", "width": 9, "height": 9}], "a photo"),
        ("document", {"file_id": "d", "file_unique_id": "d", "file_name": "x.pdf"}, "a file"),
        ("voice", {"file_id": "v", "file_unique_id": "v", "duration": 3}, "a voice message"),
    ],
)
def test_a_caption_says_what_came_with_it_so_the_model_does_not_guess(
    field: str, value: object, what: str
) -> None:
    data = message_update("ignored")
    del data["message"]["text"]
    data["message"][field] = value
    data["message"]["caption"] = "what is in this?"
    assert translate(data).text == (  # type: ignore[union-attr]
        f"[{what} came with this message, not readable here] what is in this?"
    )
    data["message"]["caption"] = "/help"  # a command stays a command
    assert translate(data).text == "/help"  # type: ignore[union-attr]
    del data["message"]["caption"]  # no text at all: the router's "I can only read text"
    assert translate(data).text == ""  # type: ignore[union-attr]


def test_reply_chunks_respect_the_utf16_budget_and_escape_each_chunk() -> None:
    text = ("😀 <b> " * 1500).strip()  # emoji are two UTF-16 units each
    chunks = reply_chunks(text)
    assert len(chunks) > 1
    for html, plain in chunks:
        assert utf16_len(plain) <= 4096
        assert "<b>" not in html  # the user's "<b>" is escaped, never a tag
        assert "&lt;b&gt;" in html


def test_a_button_press_becomes_the_command_it_names() -> None:
    data = callback_update("/use 2", user_id=7, query_id="77")
    inbound = translate(data)
    assert inbound is not None
    assert (inbound.text, inbound.kind) == ("/use 2", ChatKind.DM)
    assert inbound.chat == ChatRef(channel="telegram", chat_id="7")
    assert inbound.user.key == "telegram:7"
    assert inbound.message_id == "callback:77"  # never quoted as a message
    assert inbound.dedupe_keys == (f"telegram:update:{data['update_id']}", "telegram:callback:77")


def test_a_press_in_a_group_addresses_the_bot() -> None:
    inbound = translate(callback_update("/dismiss 1", user_id=7, chat_id=-100, chat_type="group"))
    assert inbound is not None
    assert inbound.kind is ChatKind.GROUP
    assert inbound.mentioned and inbound.reply_to_bot


def test_presses_that_are_not_ours_are_ignored_or_refused() -> None:
    assert translate(callback_update("/use 1", from_bot=True)) is None
    inline_mode = callback_update("/use 1")
    del inline_mode["callback_query"]["message"]
    assert translate(inline_mode) is None
    for data in ("use 1", "", "/" + "x" * 64):
        with pytest.raises(ValueError, match="not a command"):
            translate(callback_update(data))


def test_keyboard_rows_and_payloads_too_long_for_telegram() -> None:
    rows = ((Button(label="Use 1", payload="/use 1"), Button(label="Big", payload="/" + "x" * 64)),)
    markup = keyboard(rows)
    assert markup is not None
    assert [[b.text for b in row] for row in markup.inline_keyboard] == [["Use 1"]]
    assert keyboard(((Button(label="Big", payload="/" + "x" * 64),),)) is None
    assert keyboard(()) is None
