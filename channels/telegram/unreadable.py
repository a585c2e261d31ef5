"""Updates python-telegram-bot cannot read: kept as rejected, confirmed, never fetched again.

`Bot.get_updates` turns the whole batch into `Update` objects at once; one update it cannot
read (a field it requires missing, a shape of a newer Bot API, a date out of range) fails the
batch — with a `KeyError`, a `TypeError`, an `OverflowError`…: anything but a `TelegramError`
counts — so the offset would never move past it and every later message would wait behind
it. On such a failure the channel fetches the same batch again as JSON (`fetch_raw`) and reads
it update by update (`read_each`): what reads is handed over as usual, what does not becomes a
`RejectedInbound` with its reason and raw JSON, and the next poll confirms them all. The
library logs the raw batch, the users' texts included, at CRITICAL when it fails;
`HideRawBatch` keeps that line out of our logs (ours names the count).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from telegram import Bot, Update

from gateway.core.messages import RejectedInbound

from .events import CHANNEL

log = logging.getLogger(__name__)

RAW_LIMIT = 4000  # characters of an update's JSON kept with its rejection


class UnreadableBatch(Exception):
    """`get_updates` answered, but python-telegram-bot could not read the batch."""


class HideRawBatch(logging.Filter):
    """Drops python-telegram-bot's log line that carries a batch it could not read."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Error while parsing updates")


def hide_raw_batches() -> None:
    """Install `HideRawBatch` on the library's bot logger (once per process)."""
    logger = logging.getLogger("telegram.Bot")
    if not any(isinstance(f, HideRawBatch) for f in logger.filters):
        logger.addFilter(HideRawBatch())


async def fetch_raw(
    bot: Bot, offset: int | None, allowed: Sequence[str], read_timeout: float
) -> list[dict[str, Any]]:
    """The pending updates from `offset` on, as JSON, without waiting for new ones.

    python-telegram-bot has no public call that returns `getUpdates` unparsed (its
    `do_api_request` warns for a method it wraps); `Bot._post` is the request `get_updates`
    itself makes, stable across 22.x (the dependency is pinned below 23). This is the only
    place that touches it."""
    data: dict[str, Any] = {"timeout": 0, "allowed_updates": list(allowed)}
    if offset is not None:
        data["offset"] = offset
    result = await bot._post("getUpdates", data, read_timeout=read_timeout)
    return [u for u in result if isinstance(u, dict)] if isinstance(result, list) else []


def read_each(
    raw: Sequence[dict[str, Any]], bot: Bot
) -> tuple[list[Update | RejectedInbound], int | None]:
    """Each update read on its own, in order, and the offset that confirms them all (None
    when no update carries an id)."""
    read: list[Update | RejectedInbound] = []
    last: int | None = None
    for item in raw:
        update_id = item.get("update_id")
        if isinstance(update_id, int) and not isinstance(update_id, bool):
            last = update_id if last is None else max(last, update_id)
        try:
            read.append(Update.de_json(item, bot))
        except Exception as exc:  # whatever the library raises on a shape it cannot read
            read.append(rejected(item, exc))
    return read, None if last is None else last + 1


def rejected(item: Any, exc: BaseException) -> RejectedInbound:
    update_id = item.get("update_id") if isinstance(item, dict) else None
    try:
        text = json.dumps(item, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(item)
    # Without an id of its own, the update's JSON names it (two such updates stay two).
    name = update_id if isinstance(update_id, int) else hashlib.sha256(text.encode()).hexdigest()
    return RejectedInbound(
        channel=CHANNEL,
        key=f"telegram:update:{name}",
        reason=f"unreadable update ({type(exc).__name__})",
        raw=text[:RAW_LIMIT],
    )
