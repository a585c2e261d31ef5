"""The Telegram adapter against a respx-faked Bot API: startup, polling, webhook, sending."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
import respx
from telegram.error import InvalidToken

from channels.telegram.channel import PRESSED, TelegramChannel
from gateway.core.errors import (
    ChannelUnavailable,
    ChatUnreachable,
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
    FatalChannelError,
    VaultError,
)
from gateway.core.messages import Button, ChatRef, CommandInfo, Outbound, WebRequest
from tests.fakes import Inbox
from tests.fakes.telegram import (
    BASE,
    TOKEN,
    FakeBotAPI,
    buttons_of,
    callback_update,
    error,
    message_update,
)

CHAT = ChatRef(channel="telegram", chat_id="42")


def out(text: str, key: str = "k1", chat: ChatRef = CHAT, reply_to: str | None = None) -> Outbound:
    return Outbound(chat=chat, text=text, idempotency_key=key, reply_to=reply_to)


@pytest.fixture
async def api() -> AsyncIterator[FakeBotAPI]:
    with respx.mock(assert_all_called=False) as router:
        yield FakeBotAPI(router)


@pytest.fixture
async def tg() -> AsyncIterator[TelegramChannel]:
    async with TelegramChannel(token=TOKEN, base_url=BASE) as channel:
        yield channel


async def test_send_uses_html_and_escapes(api: FakeBotAPI, tg: TelegramChannel) -> None:
    receipt = await tg.send(out("**hi** <script> & co"))
    assert api.sent[0]["text"] == "<b>hi</b> &lt;script&gt; &amp; co"
    assert api.sent[0]["parse_mode"] == "HTML"
    assert len(receipt.platform_message_ids) == 1


async def test_rate_limit_maps_to_transient_with_retry_after(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    api.send_script.append(error(429, "Too Many Requests: retry after 7", retry_after=7))
    with pytest.raises(DeliveryTransient) as caught:
        await tg.send(out("hello"))
    assert caught.value.retry_after_s == 7
    await tg.send(out("hello"))  # the retry goes through
    assert [m["text"] for m in api.sent] == ["hello"]


async def test_retry_of_a_split_reply_does_not_repeat_chunks(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    text = ("a" * 4000) + "\n\n" + ("b" * 100)
    api.send_script.extend([None, error(429, "Too Many Requests", retry_after=1)])
    with pytest.raises(DeliveryTransient):
        await tg.send(out(text))
    receipt = await tg.send(out(text))
    assert [m["text"][:1] for m in api.sent] == ["a", "b"]
    assert len(receipt.platform_message_ids) == 2


async def test_a_split_reply_cut_short_says_which_chunks_went_out(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    """For the outbox row: a process that restarts has no memory of the attempt, and is
    handed the chunks that went out (`Outbound.sent_chunks`) to send only the rest."""
    text = ("a" * 4000) + "\n\n" + ("b" * 100)
    api.send_script.extend([None, error(429, "Too Many Requests", retry_after=600)])
    with pytest.raises(DeliveryTransient) as caught:
        await tg.send(out(text))
    assert len(caught.value.sent) == 1
    fresh = TelegramChannel(token=TOKEN, base_url=BASE)  # as after a restart
    async with fresh:
        resumed = Outbound(chat=out(text).chat, text=text, idempotency_key="k",
                           sent_chunks=caught.value.sent)  # fmt: skip
        receipt = await fresh.send(resumed)
    assert [m["text"][:1] for m in api.sent] == ["a", "b"]
    assert receipt.platform_message_ids[0] == caught.value.sent[0]


async def test_unparseable_html_is_resent_as_plain_text(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    api.send_script.append(error(400, "Bad Request: can't parse entities: unclosed tag"))
    await tg.send(out("**bold** text"))
    assert api.attempts[0]["parse_mode"] == "HTML"
    assert "parse_mode" not in api.attempts[1]
    assert api.sent[0]["text"] == "bold text"


async def test_blocked_by_user_is_chat_unreachable(api: FakeBotAPI, tg: TelegramChannel) -> None:
    api.send_script.append(error(403, "Forbidden: bot was blocked by the user"))
    with pytest.raises(ChatUnreachable):
        await tg.send(out("hi"))


async def test_other_bad_request_is_permanent(api: FakeBotAPI, tg: TelegramChannel) -> None:
    api.send_script.append(error(400, "Bad Request: message text is empty"))
    with pytest.raises(DeliveryPermanent):
        await tg.send(out("hi"))
    assert len(api.attempts) == 1  # never retried as a network error


async def test_timeout_is_uncertain(tg: TelegramChannel) -> None:
    import httpx

    with respx.mock() as router:
        router.post(url__startswith=BASE).mock(side_effect=httpx.ReadTimeout("slow"))
        with pytest.raises(DeliveryUncertain):
            await tg.send(out("hi"))


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        # Never reached Telegram: safe to retry.
        (httpx.ConnectError("refused"), DeliveryTransient),
        (httpx.ConnectTimeout("no answer to the SYN"), DeliveryTransient),
        (httpx.PoolTimeout("every connection busy"), DeliveryTransient),
        # May have been sent: never resent.
        (httpx.ReadError("reset"), DeliveryUncertain),
        (httpx.RemoteProtocolError("closed"), DeliveryUncertain),
        (httpx.ReadTimeout("slow answer"), DeliveryUncertain),
        (httpx.WriteTimeout("slow upload"), DeliveryUncertain),
    ],
)
async def test_network_errors_retry_only_when_nothing_was_sent(
    tg: TelegramChannel, failure: Exception, expected: type[Exception]
) -> None:
    with respx.mock() as router:
        router.post(url__startswith=BASE).mock(side_effect=failure)
        with pytest.raises(expected):
            await tg.send(out("hi"))


async def test_forum_topic_reply_goes_to_its_thread(api: FakeBotAPI, tg: TelegramChannel) -> None:
    chat = ChatRef(channel="telegram", chat_id="-100", thread_id="7")
    await tg.send(out("hi", chat=chat, reply_to="55"))
    assert api.sent[0]["message_thread_id"] == "7"
    assert json.loads(api.sent[0]["reply_parameters"])["message_id"] == 55


async def test_invalid_token_is_fatal(api: FakeBotAPI, tg: TelegramChannel) -> None:
    api.me_response = error(401, "Unauthorized")
    with pytest.raises(FatalChannelError) as caught:
        await tg.run(Inbox())
    assert TOKEN not in str(caught.value)
    assert isinstance(caught.value.__cause__, InvalidToken)
    health = tg.health()
    assert not health.connected
    assert "TELEGRAM_BOT_TOKEN" in health.detail


async def test_polling_hands_updates_over_in_order(api: FakeBotAPI, tg: TelegramChannel) -> None:
    tg.use_commands([CommandInfo(name="clear", summary="start over")])
    inbox = Inbox()
    api.queue_updates(message_update("one"), message_update("two"))
    task = asyncio.create_task(tg.run(inbox))
    try:
        items = await inbox.wait(2)
        assert [i.text for i in items] == ["one", "two"]
        assert "setMyCommands" in api.calls
        health = tg.health()
        assert health.connected
        assert health.last_inbound_ms is not None
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_a_batch_is_confirmed_only_once_saved(api: FakeBotAPI, tg: TelegramChannel) -> None:
    inbox = Inbox()
    inbox.fail_with.append(VaultError("disk full"))
    first = message_update("one")
    api.queue_updates(first)
    with pytest.raises(ChannelUnavailable):  # the supervisor retries with backoff
        await tg.run(inbox)
    assert "cannot save" in tg.health().detail
    # Restarted: Telegram is asked from the same offset, so it redelivers the batch.
    api.queue_updates(first)
    task = asyncio.create_task(tg.run(inbox))
    try:
        assert [i.text for i in await inbox.wait(1)] == ["one"]
        await api.wait_polls(3)
        assert api.offsets[:2] == [None, None]
        assert api.offsets[2] == str(first["update_id"] + 1)
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_an_update_that_does_not_translate_is_rejected_and_confirmed(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    inbox = Inbox()
    # A mention entity that splits a surrogate pair: its text cannot be decoded.
    broken = message_update("😀x", entities=[{"type": "mention", "offset": 1, "length": 1}])
    api.queue_updates(broken, message_update("fine"))
    task = asyncio.create_task(tg.run(inbox))
    try:
        assert [i.text for i in await inbox.wait(1)] == ["fine"]
        assert [r.key for r in inbox.rejected] == [f"telegram:update:{broken['update_id']}"]
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_an_update_the_library_cannot_read_is_rejected_and_the_stream_goes_on(
    api: FakeBotAPI, tg: TelegramChannel, caplog: pytest.LogCaptureFixture
) -> None:
    """python-telegram-bot fails a whole batch on one update it cannot read (no date, no
    chat): that one is kept as rejected, the rest handed over, all confirmed, and the
    library's log line with the users' texts is kept out of the logs."""
    inbox = Inbox()
    update_id = message_update("placeholder")["update_id"]
    unreadable = {"update_id": update_id, "message": {"message_id": 1, "text": "secret words"}}
    fine = message_update("fine")
    # Unconfirmed, the same batch comes again: once for the library, once read as JSON.
    api.queue_updates(unreadable, fine)
    api.queue_updates(unreadable, fine)
    task = asyncio.create_task(tg.run(inbox))
    try:
        with caplog.at_level(logging.INFO):  # the library's DEBUG lines carry bodies anyway
            assert [i.text for i in await inbox.wait(1)] == ["fine"]
            await api.wait_polls(3)  # the third confirms both
        assert [r.key for r in inbox.rejected] == [f"telegram:update:{update_id}"]
        assert "KeyError" in inbox.rejected[0].reason
        assert str(fine["update_id"] + 1) in api.offsets
        assert not [r for r in caplog.records if "secret words" in r.getMessage()]
        assert "1 of 2 updates could not be read" in caplog.text
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_an_update_the_library_cannot_read_over_the_webhook_is_rejected(
    api: FakeBotAPI,
) -> None:
    async with await webhook_channel() as tg:
        (route,) = tg.routes()
        inbox = Inbox()
        task = asyncio.create_task(tg.run(inbox))
        try:
            await asyncio.wait_for(tg.started.wait(), 5)
            update_id = message_update("placeholder")["update_id"]
            body = json.dumps({"update_id": update_id, "message": {"message_id": 1}}).encode()
            assert (await route.handler(webhook_request(body, "s3cret"))).status == 200
            assert [r.key for r in inbox.rejected] == [f"telegram:update:{update_id}"]
        finally:
            task.cancel()
            await asyncio.wait([task])


async def test_poll_conflict_raises_for_the_supervisor(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    api.updates_response = error(409, "Conflict: terminated by other getUpdates request")
    with pytest.raises(ChannelUnavailable):
        await tg.run(Inbox())
    health = tg.health()
    assert not health.connected
    assert "conflict" in health.detail


async def webhook_channel() -> TelegramChannel:
    return TelegramChannel(
        token=TOKEN,
        base_url=BASE,
        mode="webhook",
        webhook_url="https://iris.example/telegram/webhook",
        webhook_secret="s3cret",
    )


def webhook_request(body: bytes, secret: str | None) -> WebRequest:
    headers = {"x-telegram-bot-api-secret-token": secret} if secret is not None else {}
    return WebRequest(method="POST", path="/telegram/webhook", headers=headers, query="", body=body)


async def test_webhook_checks_the_secret_and_dispatches(api: FakeBotAPI) -> None:
    async with await webhook_channel() as tg:
        (route,) = tg.routes()
        body = json.dumps(message_update("via hook")).encode()
        assert (await route.handler(webhook_request(body, "s3cret"))).status == 503  # not running
        inbox = Inbox()
        task = asyncio.create_task(tg.run(inbox))
        try:
            await asyncio.wait_for(tg.started.wait(), 5)
            assert "setWebhook" in api.calls
            assert (await route.handler(webhook_request(body, "wrong"))).status == 401
            assert (await route.handler(webhook_request(body, None))).status == 401
            assert inbox.items == []
            assert (await route.handler(webhook_request(b"{not json", "s3cret"))).status == 400
            assert (await route.handler(webhook_request(b"[1, 2]", "s3cret"))).status == 400
            deep = b"[" * 100_000 + b"]" * 100_000  # a RecursionError for json.loads
            assert (await route.handler(webhook_request(deep, "s3cret"))).status == 400
            inbox.fail_with.append(VaultError("disk full"))
            assert (await route.handler(webhook_request(body, "s3cret"))).status == 503
            assert (await route.handler(webhook_request(body, "s3cret"))).status == 200
            assert [i.text for i in await inbox.wait(1)] == ["via hook"]
        finally:
            task.cancel()
            await asyncio.wait([task])


def test_webhook_mode_without_secret_is_fatal() -> None:
    with pytest.raises(FatalChannelError):
        TelegramChannel(token=TOKEN, base_url=BASE, mode="webhook", webhook_url="https://x")


async def test_buttons_go_under_the_last_chunk_only(api: FakeBotAPI, tg: TelegramChannel) -> None:
    rows = (
        (Button(label="Use 1", payload="/use 1"), Button(label="Dismiss 1", payload="/dismiss 1")),
    )
    text = ("a" * 4000) + "\n\n" + ("b" * 100)
    await tg.send(Outbound(chat=CHAT, text=text, idempotency_key="k", buttons=rows))
    assert buttons_of(api.sent[0]) == []
    assert buttons_of(api.sent[1]) == [
        [
            {"text": "Use 1", "callback_data": "/use 1"},
            {"text": "Dismiss 1", "callback_data": "/dismiss 1"},
        ]
    ]


async def test_plain_text_fallback_keeps_the_buttons(api: FakeBotAPI, tg: TelegramChannel) -> None:
    api.send_script.append(error(400, "Bad Request: can't parse entities: unclosed tag"))
    rows = ((Button(label="Use 1", payload="/use 1"),),)
    await tg.send(Outbound(chat=CHAT, text="**x**", idempotency_key="k", buttons=rows))
    assert "parse_mode" not in api.sent[0]
    assert buttons_of(api.sent[0]) == [[{"text": "Use 1", "callback_data": "/use 1"}]]


async def test_a_press_is_saved_before_it_is_answered(api: FakeBotAPI, tg: TelegramChannel) -> None:
    inbox = Inbox()
    bad = callback_update("not a command")
    api.queue_updates(callback_update("/use 1"), bad)
    task = asyncio.create_task(tg.run(inbox))
    try:
        assert [i.text for i in await inbox.wait(1)] == ["/use 1"]
        answers = await api.wait_answers(2)  # the refused press too: no endless spinner
        assert [a["text"] for a in answers] == [PRESSED, PRESSED]
        assert [r.key for r in inbox.rejected] == [f"telegram:update:{bad['update_id']}"]
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_a_press_that_cannot_be_saved_is_not_answered(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    inbox = Inbox()
    inbox.fail_with.append(VaultError("disk full"))
    api.queue_updates(callback_update("/use 1"))
    with pytest.raises(ChannelUnavailable):
        await tg.run(inbox)
    assert api.answers == []  # Telegram redelivers it; answered once it is saved


async def test_an_update_with_a_date_out_of_range_is_rejected_too(
    api: FakeBotAPI, tg: TelegramChannel
) -> None:
    """Not every unreadable update is a KeyError: a date past datetime's range overflows."""
    inbox = Inbox()
    broken = message_update("from the far future")
    broken["message"]["date"] = 10**20
    fine = message_update("fine")
    api.queue_updates(broken, fine)
    api.queue_updates(broken, fine)
    task = asyncio.create_task(tg.run(inbox))
    try:
        assert [i.text for i in await inbox.wait(1)] == ["fine"]
        assert [r.key for r in inbox.rejected] == [f"telegram:update:{broken['update_id']}"]
        assert "OverflowError" in inbox.rejected[0].reason
    finally:
        task.cancel()
        await asyncio.wait([task])
