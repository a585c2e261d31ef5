"""python-telegram-bot's errors in our tree, mapped in one place (as httpx maps httpcore's).

Every Bot API call of the channel runs inside one of these blocks, and each raises our error
`from` the original:

- `map_send_errors()` — sendMessage, sendChatAction: `DeliveryTransient` (with
  `retry_after_s` for a 429), `DeliveryUncertain`, `DeliveryPermanent` or `ChatUnreachable`.
- `map_link_errors(call)` — getMe, deleteWebhook, setWebhook, getUpdates: a rejected token is
  `FatalChannelError`; a 409 conflict (another poller on the token) is `ChannelConflict`, an
  alarm; anything else is `ChannelUnavailable`. The app's supervisor retries both with backoff.
- `best_effort(call)` — setMyCommands: a missing command menu must not keep the bot offline,
  so a failure is only logged.

The order of the `except` clauses matters: `BadRequest` and `TimedOut` are `NetworkError`
subclasses, and "can't parse entities" (a `BadRequest`) must never be retried as a network
error.

Sent or not: PTB's `HTTPXRequest` raises `TimedOut` for every httpx timeout and
`NetworkError` for every other httpx error, each `from` the httpx exception. The cause tells
whether the request left: `PoolTimeout` (no free connection in the pool), `ConnectTimeout`
and `ConnectError` (no connection was made) prove it never did — `DeliveryTransient`, safe to
retry. A read or write timeout, a reset or a protocol error after the connection was made may
have delivered the message — `DeliveryUncertain`, never resent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import httpx
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)

from gateway.core.errors import (
    ChannelConflict,
    ChannelUnavailable,
    ChatUnreachable,
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
    FatalChannelError,
)

log = logging.getLogger(__name__)

# httpx errors raised before any byte of the request left: retrying cannot send it twice.
NOT_SENT = (httpx.PoolTimeout, httpx.ConnectTimeout, httpx.ConnectError)


@contextmanager
def map_send_errors() -> Iterator[None]:
    try:
        yield
    except RetryAfter as exc:
        raise DeliveryTransient("telegram rate limit", retry_after_s=_seconds(exc)) from exc
    except Forbidden as exc:
        raise ChatUnreachable("telegram: the bot was blocked or removed from the chat") from exc
    except BadRequest as exc:
        if "chat not found" in exc.message.lower():
            raise ChatUnreachable("telegram: chat not found") from exc
        raise DeliveryPermanent(f"telegram rejected the message: {exc.message}") from exc
    except NetworkError as exc:  # TimedOut included
        cause = exc.__cause__
        if isinstance(cause, NOT_SENT):
            raise DeliveryTransient(f"telegram: not sent ({type(cause).__name__})") from exc
        what = type(cause).__name__ if cause is not None else type(exc).__name__
        raise DeliveryUncertain(f"telegram: {what}; the message may have been sent") from exc
    except ChatMigrated as exc:
        raise DeliveryPermanent("telegram: the group moved to a new chat id") from exc
    except TelegramError as exc:
        raise DeliveryPermanent(f"telegram error: {type(exc).__name__}") from exc


@contextmanager
def map_link_errors(call: str) -> Iterator[None]:
    try:
        yield
    except InvalidToken as exc:
        raise FatalChannelError(
            f"Telegram rejected TELEGRAM_BOT_TOKEN ({call}): check the token"
        ) from exc
    except Conflict as exc:
        raise ChannelConflict(
            f"telegram {call}: conflict (409), another poller or a webhook uses this token"
        ) from exc
    except TelegramError as exc:
        raise ChannelUnavailable(
            f"cannot reach the Bot API ({call}: {type(exc).__name__})"
        ) from exc


@contextmanager
def best_effort(call: str) -> Iterator[None]:
    try:
        yield
    except TelegramError as exc:
        log.warning("telegram: %s failed: %s", call, type(exc).__name__)


def cannot_parse_entities(exc: BadRequest) -> bool:
    """Telegram refused our HTML: the chunk goes again as plain text."""
    return "can't parse entities" in exc.message.lower()


def _seconds(exc: RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
