"""Bookkeeping the platform channels share (no platform code here; one I/O class per platform
stays in its own package).

- `InboundTurns`: inbound messages handed to the router without awaiting them (a platform's
  receive loop must not wait for a model call), each kept referenced until its turn ends, and
  a failure logged rather than lost in an unawaited task.
- `ChunkProgress`: a long reply goes out as several platform messages. When a send fails after
  some chunks went out, delivery retries the whole `Outbound`; the chunks already sent (by
  idempotency key) are skipped, so the user never sees the first half twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from gateway.core.messages import Inbound
from gateway.core.ports import InboundHandler

log = logging.getLogger(__name__)

KEEP = 1000  # partial multi-chunk sends remembered (least recently used out first)


class InboundTurns:
    def __init__(self, channel: str) -> None:
        self._channel = channel
        self._pending: set[asyncio.Future[None]] = set()

    def dispatch(self, inbound: Inbound, on_inbound: InboundHandler) -> None:
        """Hand `inbound` over in arrival order: the router schedules it at call time."""
        future = asyncio.ensure_future(on_inbound(inbound))
        self._pending.add(future)
        future.add_done_callback(self._settled)

    def _settled(self, future: asyncio.Future[None]) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("%s: inbound handler failed", self._channel, exc_info=future.exception())


class ChunkProgress:
    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._sent: OrderedDict[str, list[str]] = OrderedDict()

    def sent(self, key: str) -> list[str]:
        """Platform ids of the chunks of `key` already delivered; append to it as they go."""
        sent = self._sent.setdefault(key, [])
        self._sent.move_to_end(key)
        while len(self._sent) > self._keep:
            self._sent.popitem(last=False)
        return sent

    def done(self, key: str) -> None:
        self._sent.pop(key, None)
