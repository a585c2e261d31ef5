"""The Telegram channel: python-telegram-bot's `Bot`, driven by our own loop (never run_polling).

`run()` checks the token (getMe: an invalid token is fatal), publishes the command menu, then
either long-polls `getUpdates` or serves the webhook route on the app's HTTP server. Each
batch of updates is translated (see `events.py` in this package) and saved by the intake
before Telegram is told: the offset that confirms a batch is sent with the next getUpdates,
only after the batch is saved, and a webhook answers 200 only after saving (503 otherwise, so
Telegram redelivers). The router then schedules and tracks the turns, keeps a chat in order and
runs chats concurrently; it never waits for a reply here. An update that does not translate is
saved as rejected and confirmed, never redelivered forever. A poll that fails raises
`ChannelUnavailable`, so the app's supervisor restarts the channel with backoff; health shows
the gap and why. A 409 from getUpdates (a second poller on the token, e.g. another deployment)
is an alarm: logged once when it starts and once when it ends, and health is not ok until a
poll succeeds again (the supervisor's backoff keeps it from being a tight loop). Every Bot API
error is mapped into our tree by `errors.py` in this package.

Sending (replies in chunks, the connection gates, typing indicators) is `sender.py`'s; this
class builds the bots and their three HTTP pools (sends, polling, typing) and delegates. A
button press (a callback query) is saved like a message, as the command its payload names,
then answered with a short acknowledgement that says nothing about the outcome (the command's
answer is an ordinary message, and a user who is not allowed gets what typing the command
would get them). An update python-telegram-bot itself cannot read is `unreadable.py`'s.
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

from telegram import Bot, BotCommand, Update
from telegram.error import InvalidToken, TelegramError
from telegram.request import HTTPXRequest

from gateway.core.clock import wall_ms
from gateway.core.errors import (
    ChannelConflict,
    ChannelUnavailable,
    FatalChannelError,
    VaultError,
)
from gateway.core.jsontext import parse_json
from gateway.core.messages import (
    ChannelHealth,
    ChatRef,
    CommandInfo,
    Inbound,
    Outbound,
    RejectedInbound,
    SentReceipt,
    WebRequest,
    WebResponse,
)
from gateway.core.ports import InboundHandler, WebRoute

from .errors import best_effort, map_link_errors
from .events import CHANNEL, BotIdentity, update_to_inbound
from .sender import SEND_WAIT_S, TYPING_CONNECTIONS, TYPING_TIMEOUT_S, Sender
from .unreadable import (
    UnreadableBatch,
    fetch_raw,
    hide_raw_batches,
    read_each,
    rejected,
)

log = logging.getLogger(__name__)

# PTB 22 opt-in: durations (RetryAfter.retry_after, ...) as timedeltas. Without it PTB emits a
# deprecation warning every time Telegram rate-limits us.
os.environ.setdefault("PTB_TIMEDELTA", "true")

SECRET_HEADER = "x-telegram-bot-api-secret-token"
# Connections beyond the sends' own for the few link calls (getMe, setWebhook, setMyCommands).
LINK_CONNECTIONS = 2
ALLOWED_UPDATES = ("message", "callback_query")
# The acknowledgement of a button press (the outcome follows as a message).
PRESSED = "Got it."
WEBHOOK_MAX_DEPTH = 64  # an update nests a dozen levels at most (a reply's entities)


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
        send_connections: int = 64,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        if mode == "webhook" and not (webhook_url and webhook_secret):
            raise FatalChannelError(
                "telegram webhook mode needs [telegram] webhook_url and TELEGRAM_WEBHOOK_SECRET"
            )
        self._requests = (
            HTTPXRequest(
                connection_pool_size=send_connections + LINK_CONNECTIONS,
                read_timeout=15.0,
                pool_timeout=SEND_WAIT_S,
            ),
            HTTPXRequest(read_timeout=poll_timeout_s + 10.0),
            HTTPXRequest(
                connection_pool_size=TYPING_CONNECTIONS,
                connect_timeout=TYPING_TIMEOUT_S,
                read_timeout=TYPING_TIMEOUT_S,
                write_timeout=TYPING_TIMEOUT_S,
                pool_timeout=TYPING_TIMEOUT_S,
            ),
        )
        send, poll, typing = self._requests
        try:
            self._bot = Bot(token, base_url=base_url, request=send, get_updates_request=poll)
            # Only ever asked for sendChatAction; never initialized (no getMe of its own).
            self._typing_bot = Bot(
                token, base_url=base_url, request=typing, get_updates_request=typing
            )
        except InvalidToken as exc:
            raise FatalChannelError("TELEGRAM_BOT_TOKEN is empty or malformed") from exc
        self._sender = Sender(self._bot, self._typing_bot, send_connections)
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
        self._connected = False
        self._last_inbound_ms: int | None = None
        self._last_ok_ms: int | None = None
        self._detail = "not started"
        self._conflict: str | None = None  # the 409 alarm, until a poll succeeds again
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
        await self._sender.close()
        await self._bot.shutdown()
        for request in self._requests:  # also those of a bot that never initialized
            await request.shutdown()

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
        if self._conflict is not None:
            connected, detail = False, self._conflict
        elif connected and self._mode == "polling":
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
            if isinstance(exc, ChannelConflict) and self._conflict is None:
                log.error("telegram: ALARM %s; only one process may poll a bot token "
                          "(retrying with backoff)", exc)  # fmt: skip
                self._conflict = str(exc)
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
        hide_raw_batches()
        while True:
            try:
                updates = await self._get_updates()
            except UnreadableBatch:
                await self._read_one_by_one(on_inbound, me)
                continue
            self._last_ok_ms = self._now_ms()
            self._detail = "polling"
            if self._conflict is not None:
                log.warning("telegram: the 409 conflict is over; polling again")
                self._conflict = None
            if not updates:
                continue
            await self._save([self._translate(u, me) for u in updates], on_inbound)
            # Confirmed to Telegram by the next getUpdates, only now that they are saved.
            self._offset = updates[-1].update_id + 1
            await self._answer_presses(updates)

    async def _get_updates(self) -> tuple[Update, ...]:
        with map_link_errors("getUpdates"):
            try:
                return await self._bot.get_updates(
                    offset=self._offset,
                    timeout=timedelta(seconds=self._poll_timeout_s),
                    allowed_updates=ALLOWED_UPDATES,
                )
            except TelegramError:
                raise  # the link's errors: mapped by map_link_errors
            except Exception as exc:  # the library could not read what Telegram sent
                raise UnreadableBatch from exc

    async def _read_one_by_one(self, on_inbound: InboundHandler, me: BotIdentity) -> None:
        """A batch the library could not read (`unreadable.py`): read update by update; what
        does not read is saved as rejected and confirmed with the rest."""
        with map_link_errors("getUpdates"):
            raw = await fetch_raw(self._bot, self._offset, ALLOWED_UPDATES, read_timeout=15.0)
        self._last_ok_ms = self._now_ms()
        if not raw:
            return  # nothing pending any more: poll on
        items, offset = read_each(raw, self._bot)
        if offset is None:
            raise ChannelUnavailable("telegram getUpdates: a batch without update ids")
        updates = [u for u in items if isinstance(u, Update)]
        if len(updates) < len(items):
            log.warning(
                "telegram: %d of %d updates could not be read; kept as rejected",
                len(items) - len(updates),
                len(items),
            )
        await self._save(
            [self._translate(u, me) if isinstance(u, Update) else u for u in items], on_inbound
        )
        self._offset = offset  # confirmed by the next getUpdates, now that all are saved
        await self._answer_presses(updates)

    def _translate(self, update: Update, me: BotIdentity) -> Inbound | RejectedInbound | None:
        try:
            return update_to_inbound(update, me, now_ms=self._now_ms())
        except Exception as exc:  # one odd update must not stop the stream, nor come back
            return RejectedInbound(
                channel=CHANNEL,
                key=f"telegram:update:{update.update_id}",
                reason=f"untranslatable update ({type(exc).__name__})",
                raw=json.dumps(update.to_dict())[:4000],
            )

    async def _save(
        self, items: Sequence[Inbound | RejectedInbound | None], on_inbound: InboundHandler
    ) -> None:
        """Hand a batch to the intake; raise `ChannelUnavailable` (nothing confirmed, Telegram
        redelivers after the supervisor's backoff) if the vault cannot take it."""
        batch = [item for item in items if item is not None]
        if any(isinstance(item, Inbound) for item in batch):
            self._last_inbound_ms = self._now_ms()
        try:
            await on_inbound(batch)  # saved, turns scheduled; the router tracks them
        except VaultError as exc:
            raise ChannelUnavailable("the vault cannot save inbound messages") from exc

    async def _webhook(self, request: WebRequest) -> WebResponse:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._webhook_secret.encode()):
            return WebResponse(status=401, body="unauthorized")
        handler, me = self._handler, self._me
        if handler is None or me is None:
            return WebResponse(status=503, body="not ready")  # Telegram retries later
        try:  # bounded: 100,000 `[` would be a RecursionError (a 500) from json.loads
            body = parse_json(request.body, max_depth=WEBHOOK_MAX_DEPTH)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return WebResponse(status=400, body="bad update")  # not an update at all
        update: Update | None = None
        try:
            update = Update.de_json(body, self._bot)
            item = self._translate(update, me)
        except Exception as exc:  # kept as rejected and confirmed: Telegram stops resending
            item = rejected(body, exc)
            log.warning("telegram: an update could not be read; kept as rejected")
        self._last_ok_ms = self._now_ms()
        try:
            await self._save([item], handler)
        except ChannelUnavailable:
            return WebResponse(status=503, body="not saved")  # Telegram retries later
        if update is not None:
            await self._answer_presses([update])
        return WebResponse(status=200, body="ok")

    async def _answer_presses(self, updates: Sequence[Update]) -> None:
        """Stop the clients' spinners (best effort, on the small pool: short timeouts)."""
        for query in (u.callback_query for u in updates if u.callback_query is not None):
            with best_effort("answerCallbackQuery"):
                await self._typing_bot.answer_callback_query(query.id, text=PRESSED)

    # --- sending (`sender.py`) ----------------------------------------------------------

    async def send(self, out: Outbound) -> SentReceipt:
        return await self._sender.send(out)

    async def typing(self, chat: ChatRef) -> None:
        await self._sender.typing(chat)
