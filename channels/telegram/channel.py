"""The Telegram channel: python-telegram-bot's `Bot`, driven by our own loop (never run_polling).

`run()` checks the token (getMe: an invalid token is fatal), publishes the command menu, then
either long-polls `getUpdates` or serves the webhook route on the app's HTTP server. Each
update is translated (see `events.py` in this package) and handed to the router at once, in
arrival order and without waiting for the reply: the router schedules and tracks the turn,
keeps a chat in order and runs chats concurrently. A poll that fails raises
`ChannelUnavailable`, so the app's supervisor restarts the channel with backoff; health shows
the gap and why. Offsets live in memory — the router's vault dedupe on update_id and
(chat, message_id) absorbs a redelivery after a crash. Every Bot API error is mapped into our
tree by `errors.py` in this package.

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
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Self

from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, InvalidToken
from telegram.request import HTTPXRequest

from channels.common import ChunkProgress
from gateway.core.clock import wall_ms
from gateway.core.errors import ChannelUnavailable, FatalChannelError
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

from .errors import best_effort, cannot_parse_entities, map_link_errors, map_send_errors
from .events import CHANNEL, BotIdentity, reply_chunks, update_to_inbound

log = logging.getLogger(__name__)

# PTB 22 opt-in: durations (RetryAfter.retry_after, ...) as timedeltas. Without it PTB emits a
# deprecation warning every time Telegram rate-limits us.
os.environ.setdefault("PTB_TIMEDELTA", "true")

SECRET_HEADER = "x-telegram-bot-api-secret-token"
ALLOWED_UPDATES = ("message",)


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
        now_ms: Callable[[], int] = wall_ms,
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
        with map_link_errors("getMe"):
            me = await self._bot.get_me()
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
        except (FatalChannelError, ChannelUnavailable) as exc:
            self._detail = str(exc)  # health says why until the supervisor's restart succeeds
            raise
        finally:
            self.started.clear()
            self._handler = None
            self._connected = False

    async def _start(self) -> BotIdentity:
        with map_link_errors("getMe"):
            await self._bot.initialize()
        me = self._bot.bot
        if self._mode == "polling":
            with map_link_errors("deleteWebhook"):
                await self._bot.delete_webhook()
        else:
            with map_link_errors("setWebhook"):
                await self._bot.set_webhook(
                    self._webhook_url,
                    secret_token=self._webhook_secret,
                    allowed_updates=ALLOWED_UPDATES,
                )
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
        with best_effort("setMyCommands"):  # a missing menu must not keep the bot offline
            await self._bot.set_my_commands(menu)

    async def _poll(self, on_inbound: InboundHandler, me: BotIdentity) -> None:
        while True:
            updates = await self._get_updates()
            self._last_ok_ms = self._now_ms()
            self._detail = "polling"
            for update in updates:
                self._offset = update.update_id + 1
                self._accept(update, me, on_inbound)

    async def _get_updates(self) -> tuple[Update, ...]:
        with map_link_errors("getUpdates"):
            return await self._bot.get_updates(
                offset=self._offset,
                timeout=timedelta(seconds=self._poll_timeout_s),
                allowed_updates=ALLOWED_UPDATES,
            )

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
        on_inbound(inbound)  # scheduled now, in arrival order; the router tracks the turn

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
        with map_send_errors():
            try:
                return await self._bot.send_message(
                    chat_id,
                    html,
                    parse_mode=ParseMode.HTML,
                    message_thread_id=thread,
                    reply_parameters=reply,
                )
            except BadRequest as exc:
                if not cannot_parse_entities(exc):
                    raise
                log.warning("telegram: HTML rejected (%s); resending as plain text", exc.message)
                return await self._bot.send_message(
                    chat_id, plain, message_thread_id=thread, reply_parameters=reply
                )

    async def typing(self, chat: ChatRef) -> None:
        thread = int(chat.thread_id) if chat.thread_id else None
        with map_send_errors():
            await self._bot.send_chat_action(
                chat.chat_id, ChatAction.TYPING, message_thread_id=thread
            )
