"""The Telegram channel: python-telegram-bot's `Bot`, driven by our own loop (never run_polling).

`run()` checks the token (getMe: an invalid token is fatal), publishes the command menu, then
either long-polls `getUpdates` or serves the webhook route on the app's HTTP server. Each
update is translated (see `events.py` in this package) and handed to the router at once, in
arrival order and without waiting for the reply: the router keeps a chat in order and runs
chats concurrently. A poll that fails raises `ChannelUnavailable`, so the app's supervisor
restarts the channel with backoff; health shows the gap. Offsets live in memory — the
router's vault dedupe on update_id and (chat, message_id) absorbs a redelivery after a crash.

Sending splits on the UTF-16 budget before formatting, sends HTML, and resends a chunk as
plain text when Telegram cannot parse it. A multi-chunk reply remembers how far it got, so a
retry after a rate limit continues instead of repeating the first chunks.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Self

import httpx
from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

from channels.common import ChunkProgress, InboundTurns
from gateway.core.errors import (
    ChannelUnavailable,
    ChatUnreachable,
    DeliveryError,
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
    FatalChannelError,
)
from gateway.core.messages import (
    ChannelHealth,
    ChatRef,
    CommandInfo,
    Inbound,
    Outbound,
    SentReceipt,
    WebRequest,
    WebResponse,
)
from gateway.core.ports import InboundHandler, WebRoute

from .events import CHANNEL, BotIdentity, reply_chunks, update_to_inbound

log = logging.getLogger(__name__)

# PTB 22 opt-in: durations (RetryAfter.retry_after, ...) as timedeltas. Without it PTB emits a
# deprecation warning every time Telegram rate-limits us.
os.environ.setdefault("PTB_TIMEDELTA", "true")

SECRET_HEADER = "x-telegram-bot-api-secret-token"
ALLOWED_UPDATES = ("message",)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TelegramChannel:
    def __init__(
        self,
        *,
        token: str,
        base_url: str = "https://api.telegram.org/bot",
        mode: str = "polling",
        webhook_url: str = "",
        webhook_path: str = "/telegram/webhook",
        webhook_secret: str | None = None,
        poll_timeout_s: int = 30,
        now_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        if mode == "webhook" and not (webhook_url and webhook_secret):
            raise FatalChannelError(
                "telegram webhook mode needs [telegram] webhook_url and TELEGRAM_WEBHOOK_SECRET"
            )
        try:
            self._bot = Bot(
                token,
                base_url=base_url,
                request=HTTPXRequest(connection_pool_size=64, read_timeout=15.0),
                get_updates_request=HTTPXRequest(read_timeout=poll_timeout_s + 10.0),
            )
        except InvalidToken as exc:
            raise FatalChannelError("TELEGRAM_BOT_TOKEN is empty or malformed") from exc
        self._mode = mode
        self._webhook_url = webhook_url
        self._webhook_path = webhook_path
        self._webhook_secret = webhook_secret or ""
        self._poll_timeout_s = poll_timeout_s
        self._now_ms = now_ms
        self._commands: list[CommandInfo] = []
        self._me: BotIdentity | None = None
        self._handler: InboundHandler | None = None
        self._offset: int | None = None
        self._turns = InboundTurns(CHANNEL)
        self._progress = ChunkProgress()
        self._connected = False
        self._last_inbound_ms: int | None = None
        self._last_ok_ms: int | None = None
        self._detail = "not started"
        # Set while the channel is connected and handing updates over (tests wait on it).
        self.started = asyncio.Event()

    @property
    def name(self) -> str:
        return CHANNEL

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._bot.shutdown()

    def command_hint(self, command: str) -> str:
        return f"/{command}"

    def use_commands(self, commands: Sequence[CommandInfo]) -> None:
        self._commands = list(commands)

    def routes(self) -> list[WebRoute]:
        if self._mode != "webhook":
            return []
        return [WebRoute("POST", self._webhook_path, self._webhook)]

    def health(self) -> ChannelHealth:
        connected, detail = self._connected, self._detail
        if connected and self._mode == "polling":
            # A poll returns at least every poll_timeout_s; much longer means it is stuck.
            stale_ms = (self._poll_timeout_s * 2 + 30) * 1000
            if self._now_ms() - (self._last_ok_ms or 0) > stale_ms:
                connected, detail = False, "polling stalled"
        return ChannelHealth(
            channel=CHANNEL,
            connected=connected,
            last_inbound_ms=self._last_inbound_ms,
            last_ok_ms=self._last_ok_ms,
            detail=detail,
        )

    async def check_credentials(self) -> str:
        try:
            me = await self._bot.get_me()
        except InvalidToken as exc:
            raise FatalChannelError("Telegram rejected TELEGRAM_BOT_TOKEN (getMe)") from exc
        except TelegramError as exc:
            raise ChannelUnavailable(f"cannot reach the Bot API ({type(exc).__name__})") from exc
        return f"@{me.username}"

    # --- receiving -----------------------------------------------------------------------

    async def run(self, on_inbound: InboundHandler) -> None:
        try:
            self._me = await self._start()
            self._connected = True
            self._detail = self._mode
            self._last_ok_ms = self._now_ms()
            if self._mode == "polling":
                self.started.set()
                await self._poll(on_inbound, self._me)
            else:
                self._handler = on_inbound
                self.started.set()
                await asyncio.Event().wait()  # updates arrive through the webhook route
        finally:
            self.started.clear()
            self._handler = None
            self._connected = False

    async def _start(self) -> BotIdentity:
        try:
            await self._bot.initialize()
            me = self._bot.bot
            if self._mode == "polling":
                await self._bot.delete_webhook()
            else:
                await self._bot.set_webhook(
                    self._webhook_url,
                    secret_token=self._webhook_secret,
                    allowed_updates=ALLOWED_UPDATES,
                )
        except InvalidToken as exc:
            self._detail = "invalid token"
            raise FatalChannelError(
                "Telegram rejected TELEGRAM_BOT_TOKEN (getMe failed): check the token"
            ) from exc
        except TelegramError as exc:
            self._detail = f"cannot reach the Bot API ({type(exc).__name__})"
            raise ChannelUnavailable(f"telegram start failed: {type(exc).__name__}") from exc
        await self._publish_commands()
        log.info("telegram: connected as @%s (%s)", me.username, self._mode)
        return BotIdentity(user_id=me.id, username=me.username or "")

    async def _publish_commands(self) -> None:
        menu = [
            BotCommand(c.name, c.summary[:256])
            for c in self._commands
            if c.name.isascii() and c.name.replace("_", "").isalnum() and len(c.name) <= 32
        ]
        if not menu:
            return
        try:
            await self._bot.set_my_commands(menu)
        except TelegramError as exc:  # a missing menu must not keep the bot offline
            log.warning("telegram: setMyCommands failed: %s", type(exc).__name__)

    async def _poll(self, on_inbound: InboundHandler, me: BotIdentity) -> None:
        while True:
            updates = await self._get_updates()
            self._last_ok_ms = self._now_ms()
            self._detail = "polling"
            for update in updates:
                self._offset = update.update_id + 1
                self._accept(update, me, on_inbound)

    async def _get_updates(self) -> tuple[Update, ...]:
        try:
            return await self._bot.get_updates(
                offset=self._offset,
                timeout=timedelta(seconds=self._poll_timeout_s),
                allowed_updates=ALLOWED_UPDATES,
            )
        except InvalidToken as exc:
            self._detail = "invalid token"
            raise FatalChannelError("Telegram rejected TELEGRAM_BOT_TOKEN while polling") from exc
        except Conflict as exc:
            self._detail = "conflict: another poller or a webhook uses this token"
            raise ChannelUnavailable("telegram getUpdates conflict (409)") from exc
        except TelegramError as exc:
            self._detail = f"polling failed ({type(exc).__name__})"
            raise ChannelUnavailable(f"telegram getUpdates failed: {type(exc).__name__}") from exc

    def _accept(self, update: Update, me: BotIdentity, on_inbound: InboundHandler) -> None:
        try:
            inbound = update_to_inbound(update, me)
        except Exception:  # one odd update must not stop the stream
            log.exception("telegram: could not translate update %s", update.update_id)
            return
        if inbound is not None:
            self._dispatch(inbound, on_inbound)

    def _dispatch(self, inbound: Inbound, on_inbound: InboundHandler) -> None:
        self._last_inbound_ms = self._now_ms()
        self._turns.dispatch(inbound, on_inbound)

    async def _webhook(self, request: WebRequest) -> WebResponse:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._webhook_secret.encode()):
            return WebResponse(status=401, body="unauthorized")
        handler, me = self._handler, self._me
        if handler is None or me is None:
            return WebResponse(status=503, body="not ready")  # Telegram retries later
        try:
            update = Update.de_json(json.loads(request.body), self._bot)
        except (ValueError, TypeError, KeyError, AttributeError):
            return WebResponse(status=400, body="bad update")
        self._last_ok_ms = self._now_ms()
        self._accept(update, me, handler)
        return WebResponse(status=200, body="ok")

    # --- sending -------------------------------------------------------------------------

    async def send(self, out: Outbound) -> SentReceipt:
        chunks = reply_chunks(out.text)
        sent = self._progress.sent(out.idempotency_key)
        for index in range(len(sent), len(chunks)):
            html, plain = chunks[index]
            message = await self._send_chunk(out, html, plain, first=index == 0)
            sent.append(str(message.message_id))
        self._progress.done(out.idempotency_key)
        return SentReceipt(platform_message_ids=tuple(sent))

    async def _send_chunk(self, out: Outbound, html: str, plain: str, *, first: bool) -> Message:
        chat_id = out.chat.chat_id
        thread = int(out.chat.thread_id) if out.chat.thread_id else None
        reply = None
        if first and out.reply_to and chat_id.startswith("-") and out.reply_to.isdigit():
            # Quote the question in groups only; in a DM the context is obvious.
            reply = ReplyParameters(int(out.reply_to), allow_sending_without_reply=True)
        try:
            try:
                return await self._bot.send_message(
                    chat_id,
                    html,
                    parse_mode=ParseMode.HTML,
                    message_thread_id=thread,
                    reply_parameters=reply,
                )
            except BadRequest as exc:
                if "can't parse entities" not in exc.message.lower():
                    raise
                log.warning("telegram: HTML rejected (%s); resending as plain text", exc.message)
                return await self._bot.send_message(
                    chat_id, plain, message_thread_id=thread, reply_parameters=reply
                )
        except TelegramError as exc:
            raise map_send_error(exc) from exc

    async def typing(self, chat: ChatRef) -> None:
        thread = int(chat.thread_id) if chat.thread_id else None
        try:
            await self._bot.send_chat_action(
                chat.chat_id, ChatAction.TYPING, message_thread_id=thread
            )
        except TelegramError as exc:
            raise map_send_error(exc) from exc


def map_send_error(exc: TelegramError) -> DeliveryError:
    """Telegram's errors in our tree. Order matters: BadRequest and TimedOut are NetworkErrors."""
    if isinstance(exc, RetryAfter):
        return DeliveryTransient("telegram rate limit", retry_after_s=_retry_after_s(exc))
    if isinstance(exc, Forbidden):
        return ChatUnreachable("telegram: the bot was blocked or removed from the chat")
    if isinstance(exc, BadRequest):
        if "chat not found" in exc.message.lower():
            return ChatUnreachable("telegram: chat not found")
        return DeliveryPermanent(f"telegram rejected the message: {exc.message}")
    if isinstance(exc, TimedOut):
        return DeliveryUncertain("telegram: timed out; the message may have been sent")
    if isinstance(exc, NetworkError):
        # Only a failed connect proves the request never reached Telegram; a reset or read
        # error after it was sent may have delivered it, and a retry could send it twice.
        if isinstance(exc.__cause__, httpx.ConnectError):
            return DeliveryTransient("telegram: could not connect")
        return DeliveryUncertain(f"telegram network error after sending: {type(exc).__name__}")
    if isinstance(exc, ChatMigrated):
        return DeliveryPermanent("telegram: the group moved to a new chat id")
    return DeliveryPermanent(f"telegram error: {type(exc).__name__}")


def _retry_after_s(exc: RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
