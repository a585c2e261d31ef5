"""Sending to Telegram: a reply in chunks, and typing indicators on a pool of their own.

A reply splits on the UTF-16 budget before formatting, goes as HTML, and a chunk Telegram
cannot parse goes again as plain text. A multi-chunk reply remembers how far it got, so a retry
after a rate limit continues instead of repeating the first chunks. An `Outbound`'s buttons
become an inline keyboard under its last chunk; in a group the first chunk quotes the message
it answers.

Connections: replies and typing indicators never compete. Replies have a pool sized for every
send that can run at once (`send_connections`: the router's turns plus the background
resend), behind a gate of our own of the same size, so httpx never queues a request — a
request cancelled or timed out while queued in httpcore 1.0.9's pool can keep its connection
slot for good (encode/httpcore#1093), which is how a pool ends up full with nothing in
flight. A send that waits too long at our gate was not sent: `DeliveryTransient`. Typing
indicators go through a second, small pool with short timeouts (`TYPING_CONNECTIONS`,
`TYPING_TIMEOUT_S`, which the channel gives that pool); when its budget is spent an indicator
is skipped, and a caller that stops waiting does not cancel the request: it ends within its own
timeouts and gives its connection back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from telegram import Bot, InlineKeyboardMarkup, Message, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest

from channels.common import ChunkProgress, chunks_so_far
from gateway.core.errors import DeliveryTransient
from gateway.core.messages import ChatRef, Outbound, SentReceipt

from .errors import cannot_parse_entities, map_send_errors
from .events import keyboard, reply_chunks

log = logging.getLogger(__name__)

# Longest a send waits for one of its connections; past it the message was not sent.
SEND_WAIT_S = 10.0
# Typing indicators: their own small pool, short timeouts.
TYPING_CONNECTIONS = 8
TYPING_TIMEOUT_S = 5.0


class Sender:
    """`bot` sends the replies (on the sends' pool), `typing_bot` only the typing indicators
    (on theirs); `send_connections` is the size of the sends' pool and gate."""

    def __init__(self, bot: Bot, typing_bot: Bot, send_connections: int) -> None:
        self._bot = bot
        self._typing_bot = typing_bot
        self._send_gate = asyncio.Semaphore(send_connections)
        self._typing_gate = asyncio.Semaphore(TYPING_CONNECTIONS)
        self._typing_tasks: set[asyncio.Task[None]] = set()
        self._progress = ChunkProgress()

    async def close(self) -> None:
        """Stop the typing indicators still in flight."""
        typing = set(self._typing_tasks)
        for task in typing:
            task.cancel()
        if typing:
            await asyncio.wait(typing)

    async def send(self, out: Outbound) -> SentReceipt:
        chunks = reply_chunks(out.text)
        sent = self._progress.sent(out.idempotency_key, out.sent_chunks)
        for index in range(len(sent), len(chunks)):
            html, plain = chunks[index]
            with chunks_so_far(sent):
                message = await self._send_chunk(
                    out, html, plain, first=index == 0, last=index == len(chunks) - 1
                )
            sent.append(str(message.message_id))
        self._progress.done(out.idempotency_key)
        return SentReceipt(platform_message_ids=tuple(sent))

    async def _send_chunk(
        self, out: Outbound, html: str, plain: str, *, first: bool, last: bool
    ) -> Message:
        chat_id = out.chat.chat_id
        thread = int(out.chat.thread_id) if out.chat.thread_id else None
        reply = None
        if first and out.reply_to and chat_id.startswith("-") and out.reply_to.isdigit():
            # Quote the question in groups only; in a DM the context is obvious.
            reply = ReplyParameters(int(out.reply_to), allow_sending_without_reply=True)
        markup = keyboard(out.buttons) if last else None
        with map_send_errors():
            async with self._send_connection():
                return await self._send_html_or_plain(chat_id, html, plain, thread, reply, markup)

    async def _send_html_or_plain(
        self,
        chat_id: str,
        html: str,
        plain: str,
        thread: int | None,
        reply: ReplyParameters | None,
        markup: InlineKeyboardMarkup | None,
    ) -> Message:
        try:
            return await self._bot.send_message(
                chat_id,
                html,
                parse_mode=ParseMode.HTML,
                message_thread_id=thread,
                reply_parameters=reply,
                reply_markup=markup,
            )
        except BadRequest as exc:
            if not cannot_parse_entities(exc):
                raise
            log.warning("telegram: HTML rejected (%s); resending as plain text", exc.message)
            return await self._bot.send_message(
                chat_id,
                plain,
                message_thread_id=thread,
                reply_parameters=reply,
                reply_markup=markup,
            )

    @contextlib.asynccontextmanager
    async def _send_connection(self) -> AsyncIterator[None]:
        """One of the sends' connections, or `DeliveryTransient` (nothing was sent)."""
        try:
            async with asyncio.timeout(SEND_WAIT_S):
                await self._send_gate.acquire()
        except TimeoutError as exc:
            raise DeliveryTransient(
                f"telegram: no free connection within {SEND_WAIT_S:.0f} s; not sent"
            ) from exc
        try:
            yield
        finally:
            self._send_gate.release()

    async def typing(self, chat: ChatRef) -> None:
        """Best effort: skipped while every typing connection is busy. The request runs in a
        task of its own that the caller's cancellation does not reach (`shield`)."""
        if self._typing_gate.locked():
            return
        await self._typing_gate.acquire()  # free now: returns at once
        task = asyncio.create_task(self._chat_action(chat), name="telegram typing")
        self._typing_tasks.add(task)
        task.add_done_callback(self._typing_done)
        await asyncio.shield(task)

    async def _chat_action(self, chat: ChatRef) -> None:
        try:
            thread = int(chat.thread_id) if chat.thread_id else None
            with map_send_errors():
                await self._typing_bot.send_chat_action(
                    chat.chat_id, ChatAction.TYPING, message_thread_id=thread
                )
        finally:
            self._typing_gate.release()

    def _typing_done(self, task: asyncio.Task[None]) -> None:
        self._typing_tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here too: its caller may have stopped waiting
