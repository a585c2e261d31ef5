"""The channels' `on_inbound`: save every inbound message first, then hand it to the router.

A channel awaits this before it confirms a delivery to its platform, so a message is either
saved here or still the platform's to redeliver — never lost in between (`vault/intake.py`
says why). A saved message's row goes when its turn ends; a turn cancelled by shutdown, or
deferred by the router (the vault went away mid-turn), keeps its row, and `replay()` at the
next start hands every such message to the router again, in arrival order, before any channel
receives new ones. A replayed message that was recorded already is resumed, or found answered
(the record step decides, see `steps.py`).

If the vault cannot take the batch (disk full, read-only), this raises `VaultError`: the
channel must not confirm, so the platform redelivers later. It is logged once per outage.

This is the one-process intake (SQLite). On PostgreSQL, where several replicas may share the
vault, `shared_intake.py` saves the same way but runs a chat's messages only where the chat is
claimed (`gateway/app/intake.py` picks one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from gateway.core.errors import VaultError
from gateway.core.messages import Inbound, RejectedInbound
from gateway.core.metrics import Metrics
from gateway.core.ports import Clock
from gateway.turns.router import Router, TurnEnd
from vault.intake import IntakeStore

log = logging.getLogger(__name__)


class Intake:
    def __init__(
        self, *, store: IntakeStore, router: Router, clock: Clock, metrics: Metrics,
        served: Sequence[str] | None = None,
    ) -> None:  # fmt: skip
        self.store = store
        self.router = router
        self.clock = clock
        self.metrics = metrics
        # The channels this process runs: it replays only their saved messages (`iris chat`
        # leaves Telegram's to `iris run`, whose replies it could not send). None: all.
        self.served = None if served is None else tuple(sorted(served))
        self.failing = False  # the last save failed (health says so until one succeeds)

    async def __call__(
        self, items: Sequence[Inbound | RejectedInbound]
    ) -> list[asyncio.Future[None]]:
        """Save the batch, then schedule its turns in order; the turns' futures."""
        if not items:
            return []
        try:
            turns = await self._take(items)
        except VaultError as exc:
            if not self.failing:
                log.error("intake: cannot save inbound messages (%s); not confirming them", exc)
            self.failing = True
            self.metrics.intake.inc("unsaved", amount=len(items))
            raise
        if self.failing:
            log.info("intake: saving inbound messages again")
        self.failing = False
        for item in items:
            if isinstance(item, RejectedInbound):
                log.warning("%s: rejected delivery %s: %s", item.channel, item.key, item.reason)
                self.metrics.intake.inc("rejected")
        return turns

    async def _take(self, items: Sequence[Inbound | RejectedInbound]) -> list[asyncio.Future[None]]:
        """Save the batch and schedule its turns (on PostgreSQL: `shared_intake.py`)."""
        admitted = await self.store.admit(items, self.clock.now_ms())
        return [self._submit(row_id, inbound, replay=False) for row_id, inbound in admitted]

    def serves(self, chat_key: str) -> bool:
        return self.served is None or chat_key.partition(":")[0] in self.served

    def jobs(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """Background work the intake needs while serving (none: one process, one vault)."""
        return []

    async def close(self) -> None:
        """After the router drained: give up what this replica holds (nothing here)."""

    async def replay(self) -> int:
        """Hand every saved, unfinished message to the router again; how many."""
        pending, unreadable = await self.store.pending(self.served)
        for row_id in unreadable:
            log.warning("intake: saved message %d cannot be read by this version: rejected", row_id)
        for row in pending:
            self._submit(row.id, row.inbound, replay=True)
        if pending:
            log.info("intake: replaying %d message(s) saved before the last stop", len(pending))
        self.metrics.intake.inc("replayed", amount=len(pending))
        return len(pending)

    def _submit(self, row_id: int, inbound: Inbound, *, replay: bool) -> asyncio.Future[None]:
        self.metrics.intake.inc("saved")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self.router.accepting:  # stopping: the row stays for the next start
            done.set_result(None)
            return done
        task = self.router.submit(inbound, replay=replay)
        task.add_done_callback(lambda t: self._ended(row_id, t))
        task.add_done_callback(lambda t: mirror(done, t))
        return done

    def _ended(self, row_id: int, task: asyncio.Future[TurnEnd]) -> None:
        if task.cancelled() or task.result() is TurnEnd.DEFERRED:
            return  # cut off by shutdown (or the vault went away): run again at the next start
        self.store.finish_soon(row_id)


def mirror(future: asyncio.Future[None], turn: asyncio.Future[TurnEnd]) -> None:
    """What a channel's future says once its turn ended: done, or cancelled with it."""
    if future.done():
        return
    if turn.cancelled():
        future.cancel()
    else:
        future.set_result(None)
