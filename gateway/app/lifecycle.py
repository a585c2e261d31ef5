"""Long-lived jobs of the running app: the channel supervisor and the daily housekeeping.

`App.serve` runs them under its task group. A channel that loses its link is restarted with
capped exponential backoff (reset after a healthy run); a fatal channel error (a bad token)
ends the app. A conflict (another poller on the token) backs off the same way, but its restarts
are not logged one by one: the channel raises the alarm once and health shows it.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.core.errors import (
    ChannelConflict,
    ChannelUnavailable,
    FatalChannelError,
    VaultError,
)
from gateway.core.ports import Channel, Clock, InboundHandler
from vault.inbound import InboundLog

log = logging.getLogger(__name__)

CHANNEL_BACKOFF_MAX_S = 60.0
HOUSEKEEPING_INTERVAL_S = 24 * 3600.0
DEDUPE_KEEP_MS = 30 * 24 * 3600 * 1000


async def housekeeping(inbound_log: InboundLog, clock: Clock) -> None:
    """Once a day: forget dedupe keys older than a month (platforms redeliver for days, not
    months), so the table stays small."""
    while True:
        await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
        try:
            dropped = await inbound_log.purge(clock.now_ms() - DEDUPE_KEEP_MS)
            log.info("housekeeping: %d old dedupe keys dropped", dropped)
        except VaultError:
            log.exception("housekeeping failed")


async def supervise(channel: Channel, submit: InboundHandler, clock: Clock) -> None:
    """Restart a channel after transient errors with capped backoff; fatal errors stop Iris."""
    delay = 1.0
    trace: Exception | None
    level = logging.WARNING
    while True:
        started_ms = clock.now_ms()
        try:
            await channel.run(submit)
            return
        except FatalChannelError:
            raise
        except ChannelConflict as exc:  # an alarm the channel logs once; backing off quietly
            problem, trace, level = str(exc), None, logging.DEBUG
        except ChannelUnavailable as exc:  # expected (network, outage): no traceback
            problem, trace, level = str(exc), None, logging.WARNING
        except Exception as exc:
            problem, trace, level = f"failed ({type(exc).__name__})", exc, logging.WARNING
        if clock.now_ms() - started_ms > CHANNEL_BACKOFF_MAX_S * 1000:
            delay = 1.0  # it ran fine for a while: a new outage, not the same one
        log.log(
            level, "channel %s: %s; restarting in %.0f s", channel.name, problem, delay,
            exc_info=trace,
        )  # fmt: skip
        await clock.sleep(delay)
        delay = min(delay * 2, CHANNEL_BACKOFF_MAX_S)
