"""Bookkeeping the platform channels share (no platform code here; one I/O class per platform
stays in its own package).

`ChunkProgress`: a long reply goes out as several platform messages. When a send fails after
some chunks went out, delivery retries the whole `Outbound`; the chunks already sent (by
idempotency key) are skipped, so the user never sees the first half twice. Across a restart
the outbox row remembers them: a transient failure carries the ids sent so far
(`DeliveryTransient.sent`, set by `chunks_so_far`), delivery keeps them in the row and hands
them back as `Outbound.sent_chunks`.

Inbound turns need nothing here: a channel calls `on_inbound(inbound)` in arrival order and
the router schedules, tracks and logs the turn (`gateway.core.ports.InboundHandler`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.core.errors import DeliveryTransient

KEEP = 1000  # partial multi-chunk sends remembered (least recently used out first)


class ChunkProgress:
    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._sent: OrderedDict[str, list[str]] = OrderedDict()

    def sent(self, key: str, earlier: tuple[str, ...] = ()) -> list[str]:
        """Platform ids of the chunks of `key` already delivered; append to it as they go.
        `earlier`: what the message's outbox row says went out (before a restart)."""
        sent = self._sent.setdefault(key, [])
        if len(earlier) > len(sent):
            sent[:] = earlier
        self._sent.move_to_end(key)
        while len(self._sent) > self._keep:
            self._sent.popitem(last=False)
        return sent

    def done(self, key: str) -> None:
        self._sent.pop(key, None)


@contextmanager
def chunks_so_far(sent: list[str]) -> Iterator[None]:
    """A transient failure inside carries the chunks already sent (for the outbox row)."""
    try:
        yield
    except DeliveryTransient as exc:
        if len(sent) > len(exc.sent):
            exc.sent = tuple(sent)
        raise
