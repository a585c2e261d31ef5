"""Whether each channel can deliver, as its sends show it: the delivery half of `/healthz`.

A channel's own `health()` knows whether its receive link works; only the outcomes of sends
know whether messages get out. `Delivery` reports every outcome here: a send that ended
uncertain, that failed after all its attempts, or that had to be put off (a long Retry-After,
a link that keeps failing) marks the channel as not delivering, with the reason; the next
message it delivers clears the mark. A put-off message is still waiting, so its mark stays
until it (or another) is delivered; the mark of an uncertain or failed send, after which
nothing waits, lapses after `LAPSE_S` without another (else a quiet bot that recovered would
fail its health checks until somebody happened to write). A message refused for itself (too
long, a user who blocked the bot) says nothing about the channel and leaves the mark alone.

The mark goes to `/healthz` (`gateway/admin/http.py`: not ok, with the channel and reason)
and to the `iris_delivery_ok` gauge. Each send is logged by `Delivery`; here only the way
back is logged, once, when a channel delivers again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.core.metrics import LabelValues

log = logging.getLogger(__name__)

LAPSE_S = 15 * 60.0  # how long an uncertain or failed send, with nothing waiting, is shown


@dataclass(frozen=True, slots=True)
class DeliveryProblem:
    reason: str
    since_ms: int
    until_ms: int | None = None  # None: until the channel delivers again


class DeliveryHealth:
    def __init__(self, now_ms: Callable[[], int], channels: Iterable[str] = ()) -> None:
        self._now_ms = now_ms
        self._channels = set(channels)
        self._problems: dict[str, DeliveryProblem] = {}

    def delivered(self, channel: str) -> None:
        self._channels.add(channel)
        problem = self._problems.pop(channel, None)
        if problem is not None:
            since = datetime.fromtimestamp(problem.since_ms / 1000, UTC)
            log.info("%s delivers again (it could not since %s UTC)", channel,
                     since.strftime("%Y-%m-%d %H:%M:%S"))  # fmt: skip

    def cannot_deliver(self, channel: str, reason: str, *, lapses: bool = False) -> None:
        """The latest reason wins; `since_ms` stays when the trouble began. `lapses`: nothing
        is left waiting (an uncertain or failed send), so the mark ends after `LAPSE_S`."""
        self._channels.add(channel)
        now = self._now_ms()
        earlier = self._current().get(channel)
        since = earlier.since_ms if earlier is not None else now
        until = now + int(LAPSE_S * 1000) if lapses else None
        if earlier is not None and earlier.until_ms is None:
            until = None  # a put-off message still waits: its mark stays until a delivery
        self._problems[channel] = DeliveryProblem(reason, since, until)

    def _current(self) -> dict[str, DeliveryProblem]:
        now = self._now_ms()
        for channel, problem in list(self._problems.items()):
            if problem.until_ms is not None and problem.until_ms <= now:
                del self._problems[channel]
        return self._problems

    def problems(self) -> Mapping[str, DeliveryProblem]:
        return dict(self._current())

    async def gauge(self) -> dict[LabelValues, float]:
        """`iris_delivery_ok`: 1 per channel that delivers, 0 while it cannot."""
        problems = self._current()
        return {(c,): 0.0 if c in problems else 1.0 for c in self._channels}
