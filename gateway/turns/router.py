"""The router: runs each inbound message through the pipeline, in order per chat.

The chain of steps comes built from `gateway/turns/turn.py`; `gateway/turns/steps.py` holds
the core steps and `gateway/app/app.py` picks them. The router itself only knows about
ordering, concurrency, shutdown and errors:

- one lock per chat (FIFO, evicted when idle) keeps a chat strictly in order, and global
  slots bound the turns running at once; different chats run concurrently. A turn gives its
  slot back while it waits on the model (`gateway/core/slots.py`: the agent steps out), so a
  slow or rate-limited model never holds the slots other chats need;
- `submit()` schedules a turn at call time (so call order is handling order within a chat)
  and returns a task the caller may await;
- `drain()` stops intake, waits for in-flight turns under a deadline, then cancels the rest;
- errors are handled once, here: logged, answered with a fixed apology (never `str(exc)`),
  and the inbound message stays recorded because the record step committed it already;
- a turn that fails while the vault is away (`vault_problem()`: PostgreSQL lost, reconnecting;
  or back already, but on a new connection made during the turn: `vault_connections()`) cannot
  apologise through the outbox, a vault write: the same apology goes straight to the
  channel (one attempt, once per message, logged) and the turn ends `DEFERRED`, so the intake
  keeps the message unfinished and runs it again once the vault is back. The apology is not
  an answer (no outbox row, not in the history): the turn run again answers normally, or,
  if it had been answered before the vault went, finds that and stops (`resume.py`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from enum import StrEnum
from types import TracebackType
from typing import Self

from gateway.core.errors import (
    ModelKeyRejected,
    ModelNotConfigured,
    ModelRejected,
    ModelUnavailable,
    UserInputError,
)
from gateway.core.messages import Inbound, OutboundKind
from gateway.core.metrics import Metrics
from gateway.core.ports import Clock
from gateway.core.slots import TurnSlots
from gateway.turns.locks import ChatLocks
from gateway.turns.replies import Replier, reply_key_prefix
from gateway.turns.turn import Step, Turn, build_chain

log = logging.getLogger(__name__)

APOLOGY = "Sorry — something went wrong on my side. Your message is saved; please try again."
# The vault went away mid-turn: the saved message runs again once it is back, by itself.
VAULT_AWAY = (
    "Sorry — I can't reach my storage right now. Your message is saved and I'll answer it as "
    "soon as I can; no need to send it again."
)
MODEL_DOWN = (
    "Sorry — the model is unavailable right now. Your message is saved; please try again {when}."
)
KEY_REFUSED = (
    "Sorry — the model refused this gateway's API key, so I can't answer until an admin "
    "fixes it. Your message is saved."
)
KEY_REFUSED_ADMIN = (
    " You are an admin: set a valid ANTHROPIC_API_KEY, check it with `iris doctor --online`, "
    "and restart Iris."
)
MODEL_REFUSED = (
    "Sorry — the model service refuses this gateway's model setting, so I can't answer until "
    "an admin fixes it. Your message is saved."
)
MODEL_REFUSED_ADMIN = (
    " You are an admin: `iris doctor --online` says what to change ([llm] model), then "
    "restart Iris."
)
NO_MODEL = (
    "No model is configured — set ANTHROPIC_API_KEY and restart Iris. Your message is saved, "
    "and commands work meanwhile (try {help})."
)


def again(retry_after_s: float | None) -> str:
    """When to try again, from the wait the model API asked for (a minute if it said none)."""
    if retry_after_s is None or retry_after_s <= 90:
        return "in a minute"
    minutes = math.ceil(retry_after_s / 60)
    if minutes <= 90:
        return f"in about {minutes} minutes"
    return f"in about {math.ceil(minutes / 60)} hours"


class TurnEnd(StrEnum):
    DONE = "done"  # handled: answered, refused, or failed with an apology
    DEFERRED = "deferred"  # not handled (the vault went away, or stopping): run it again


class Router:
    def __init__(
        self,
        *,
        steps: Sequence[Step],
        replier: Replier,
        clock: Clock,
        max_concurrency: int = 32,
        drain_timeout_s: float = 10.0,
        metrics: Metrics | None = None,
        locks: ChatLocks | None = None,
        slots: TurnSlots | None = None,
        vault_problem: Callable[[], str | None] = lambda: None,
        vault_connections: Callable[[], int] = lambda: 1,
    ) -> None:
        self._chain = build_chain(steps)
        self._metrics = metrics or Metrics()
        self._replier = replier
        self._clock = clock
        self._slots = slots or TurnSlots(max_concurrency)
        self._locks = locks or ChatLocks()
        self._vault_problem = vault_problem
        self._vault_connections = vault_connections
        self._apologised: set[str] = set()  # messages told directly while the vault was away
        self._tasks: set[asyncio.Task[TurnEnd]] = set()
        self._accepting = True
        self._drain_timeout_s = drain_timeout_s

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.drain()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def accepting(self) -> bool:
        return self._accepting

    def submit(self, inbound: Inbound, *, replay: bool = False) -> asyncio.Future[TurnEnd]:
        """Schedule a turn now; the returned task completes when it has been handled, or was
        deferred. `replay`: the message was saved earlier and may have been recorded."""
        if not self._accepting:
            log.warning("shutting down: not accepting message %s", inbound.message_id)
            done: asyncio.Future[TurnEnd] = asyncio.get_running_loop().create_future()
            done.set_result(TurnEnd.DEFERRED)
            return done
        task = asyncio.create_task(self.handle(inbound, replay), name=f"turn {inbound.chat.key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def handle(self, inbound: Inbound, replay: bool = False) -> TurnEnd:
        self._metrics.inbound.inc(inbound.chat.channel)
        async with self._locks.hold(inbound.chat.key), self._slots.hold():
            turn = Turn(inbound=inbound, now_ms=self._clock.now_ms(), replay=replay)
            return await self._run_safely(turn)

    async def drain(self) -> None:
        self._accepting = False
        if not self._tasks:
            return
        log.warning(
            "stopping: waiting up to %.0f s for %d turn(s) in flight (Ctrl-C or SIGTERM again "
            "to quit now; their messages are saved)", self._drain_timeout_s, len(self._tasks),
        )  # fmt: skip
        _, pending = await asyncio.wait(set(self._tasks), timeout=self._drain_timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled %d turn(s) still running at the drain deadline", len(pending))
            await asyncio.wait(pending)

    async def _run_safely(self, turn: Turn) -> TurnEnd:
        key = reply_key_prefix(turn.inbound)
        connections = self._vault_connections()
        try:
            await self._chain(turn)
        except Exception as exc:
            away = self._vault_problem()
            if away is None and self._vault_connections() != connections:
                away = "the vault reconnected during the turn"  # and may have failed it
            if away is None:
                await self._failed(turn, exc)
            else:
                await self._apologise_directly(turn, key, away)
                return TurnEnd.DEFERRED
        self._apologised.discard(key)
        return TurnEnd.DONE

    async def _failed(self, turn: Turn, exc: Exception) -> None:
        if isinstance(exc, UserInputError):
            await self._answer_error(turn, exc.user_message)
        elif isinstance(exc, ModelNotConfigured):
            hint = self._replier.hint_for(turn.inbound.chat.channel)
            await self._answer_error(turn, NO_MODEL.format(help=hint("help")))
        elif isinstance(exc, ModelKeyRejected):  # logged, and admins told, by ModelHealth
            admin = KEY_REFUSED_ADMIN if turn.is_admin else ""
            await self._answer_error(turn, KEY_REFUSED + admin)
        elif isinstance(exc, ModelUnavailable):
            log.warning("model unavailable for %s: %s", turn.inbound.chat.key, exc)
            await self._answer_error(turn, MODEL_DOWN.format(when=again(exc.retry_after_s)))
        elif isinstance(exc, ModelRejected):  # the reason is ours to log: no traceback
            log.warning("model refused the request for %s: %s", turn.inbound.chat.key, exc)
            if exc.refuses_model:
                admin = MODEL_REFUSED_ADMIN if turn.is_admin else ""
                await self._answer_error(turn, MODEL_REFUSED + admin)
            else:
                await self._answer_error(turn, APOLOGY)
        else:
            log.error("turn failed for %s", turn.inbound.chat.key, exc_info=exc)
            await self._answer_error(turn, APOLOGY)

    async def _apologise_directly(self, turn: Turn, key: str, away: str) -> None:
        chat = turn.inbound.chat.key
        log.warning("turn for %s failed with the vault away (%s); the message runs again once "
                    "it is back", chat, away)  # fmt: skip
        if not turn.authorized or key in self._apologised:
            return  # never to someone not admitted; at most once per message
        if len(self._apologised) >= 10_000:  # the keys of messages another replica finished
            self._apologised.clear()
        self._apologised.add(key)
        try:
            await self._replier.send_directly(turn, VAULT_AWAY)
        except Exception:
            log.exception("could not send the apology to %s directly", chat)
        else:
            log.info("apology sent to %s directly (not through the outbox)", chat)

    async def _answer_error(self, turn: Turn, text: str) -> None:
        if not turn.authorized:
            return  # never talk to someone the auth step has not admitted
        try:
            await self._replier.send(turn, text, kind="notice", out_kind=OutboundKind.NOTICE)
        except Exception:
            log.exception("could not send the error notice to %s", turn.inbound.chat.key)
