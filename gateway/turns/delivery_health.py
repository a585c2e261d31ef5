"""Whether each channel can deliver, as its sends show it: the delivery half of `/healthz`.

A channel's own `health()` knows whether its receive link works; only the outcomes of sends
know whether messages get out. `Delivery` reports every outcome here: a send that ended
uncertain, that failed after all its attempts, or that had to be put off (a long Retry-After,
a link that keeps failing) marks the channel as not delivering, with the reason; the next
message it delivers clears the mark. A message refused for itself (too long, a user who
blocked the bot) says nothing about the channel and leaves the mark alone.

The mark goes to `/healthz` (`gateway/admin/http.py`: not ok, with the channel and reason)
and to the `iris_delivery_ok` gauge. Each send is logged by `Delivery`; here only the way
back is logged, once, when a channel delivers again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gateway.core.metrics import LabelValues

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeliveryProblem:
    reason: str
    since_ms: int


class DeliveryHealth:
    def __init__(self, now_ms: Callable[[], int], channels: Iterable[str] = ()) -> None:
        self._now_ms = now_ms
        self._channels = set(channels)
        self._problems: dict[str, DeliveryProblem] = {}

    def delivered(self, channel: str) -> None:
        self._channels.add(channel)
        problem = self._problems.pop(channel, None)
        if problem is not None:
            log.info("%s delivers again (it could not since %d ms)", channel, problem.since_ms)

    def cannot_deliver(self, channel: str, reason: str) -> None:
        """The latest reason wins; `since_ms` stays when the trouble began."""
        self._channels.add(channel)
        earlier = self._problems.get(channel)
        since = earlier.since_ms if earlier is not None else self._now_ms()
        self._problems[channel] = DeliveryProblem(reason, since)

    def problems(self) -> Mapping[str, DeliveryProblem]:
        return dict(self._problems)

    async def gauge(self) -> dict[LabelValues, float]:
        """`iris_delivery_ok`: 1 per channel that delivers, 0 while it cannot."""
        return {(c,): 0.0 if c in self._problems else 1.0 for c in self._channels}
