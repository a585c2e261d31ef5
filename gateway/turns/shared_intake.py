"""The intake when several replicas share a PostgreSQL vault: saved by any, run by the chat's
claim holder, in arrival order.

A replica saves what its channels receive exactly as on SQLite (then the platform is told), and
in the same transaction claims each chat of the batch (`vault/intake_claims.py`). It runs the
chats it holds — one loop per chat: take the oldest pending message, hand it to the router,
wait for the turn, repeat, and release the chat in the transaction that finds nothing left —
so a chat is never in two replicas at once and its messages run in id (arrival) order. A chat
held by another replica is left to it; a hint (NOTIFY) wakes that holder if it is about to
release. Other replicas find chats nobody runs — their holder died and its lease expired, or
gave them up while stopping — through the hints (`vault/pg/notify.py`) and a poll every
`[vault] inbound_poll_s` (≤ 1 s) as the fallback. A holder renews its leases every third of
`[vault] inbound_lease_s` while it runs.

A message runs as a fresh turn only when this process saved it while holding the chat (nobody
else can have started it); anything else — taken over, saved by another replica, left by a
stop — runs as a replay, so a message recorded already is resumed or found answered (the record
step and `resume.py` decide) and answered once. A turn the router deferred because the vault
went away mid-turn stays the chat's oldest pending message: the loop waits for the next poll or
hint and runs it again, as a replay, once the vault answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from gateway.core.errors import VaultError
from gateway.core.messages import Inbound, RejectedInbound
from gateway.core.metrics import Metrics
from gateway.core.ports import Clock
from gateway.turns.intake import Intake, mirror
from gateway.turns.router import Router, TurnEnd
from vault.intake import IntakeStore, Pending
from vault.intake_claims import OURS, Claim, IntakeClaims, Next

log = logging.getLogger(__name__)


class Hints(Protocol):
    """The wake-up hints (`vault.pg.notify.Notifications`): `deliver(payload)` per hint, `""`
    after each (re)connection."""

    listening: asyncio.Event

    async def run(self, deliver: Callable[[str], None]) -> None: ...


class _Run:
    """A chat this replica holds: its loop's wake-up, and the turns of the messages saved for
    it here (row id -> the future the channel got, and whether it runs fresh)."""

    __slots__ = ("gen", "task", "waiting", "wake")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.gen = 0  # bumped by every claim that finds the chat ours while the loop runs
        self.waiting: dict[int, tuple[asyncio.Future[None], bool]] = {}
        self.task: asyncio.Task[None] | None = None


class SharedIntake(Intake):
    def __init__(
        self, *, store: IntakeStore, claims: IntakeClaims, router: Router, clock: Clock,
        metrics: Metrics, replica: str, hints: Hints | None = None, lease_s: float = 15.0,
        poll_s: float = 1.0, served: Sequence[str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(store=store, router=router, clock=clock, metrics=metrics, served=served)
        self.claims = claims
        self.replica = replica
        self.hints = hints
        self.lease_s = lease_s
        self.poll_s = poll_s
        self._runs: dict[str, _Run] = {}
        self._to_claim: set[str] = set()
        self._claim_wake = asyncio.Event()
        self._tg: asyncio.TaskGroup | None = None
        self._closing = False
        self._scan_failing = False  # logged once per outage

    @property
    def held(self) -> list[str]:
        """The chats this replica runs now."""
        return list(self._runs)

    def _lease_until(self) -> int:
        return self.clock.now_ms() + int(self.lease_s * 1000)

    def _stopping(self) -> bool:
        return self._closing or not self.router.accepting

    async def _take(self, items: Sequence[Inbound | RejectedInbound]) -> list[asyncio.Future[None]]:
        admitted = await self.claims.admit(
            items, replica=self.replica, running=set(self._runs), now_ms=self.clock.now_ms(),
            lease_until=self._lease_until(), claim=not self._stopping(),
        )  # fmt: skip
        for chat_key, outcome in admitted.claims.items():
            if outcome in OURS:
                self._hold(chat_key)
        loop = asyncio.get_running_loop()
        turns: list[asyncio.Future[None]] = []
        for row_id, inbound in admitted.rows:
            self.metrics.intake.inc("saved")
            future: asyncio.Future[None] = loop.create_future()
            claim = admitted.claims.get(inbound.chat.key)
            run = self._runs.get(inbound.chat.key)
            if run is not None and claim in OURS:
                run.waiting[row_id] = (future, claim in (Claim.NEW, Claim.MINE))
            else:
                future.set_result(None)  # another replica runs it
            turns.append(future)
        return turns

    async def replay(self) -> int:
        """At start: claim the chats with saved messages nobody runs; how many."""
        found = await self.claims.claimable(
            replica=self.replica, now_ms=self.clock.now_ms(), channels=self.served
        )
        chats = [chat_key for chat_key in found if chat_key not in self._runs]
        claimed = await self.claims.claim(
            chats, replica=self.replica, running=set(self._runs), now_ms=self.clock.now_ms(),
            lease_until=self._lease_until(),
        )  # fmt: skip
        ours = [chat_key for chat_key, outcome in claimed.items() if outcome in OURS]
        for chat_key in ours:
            self._hold(chat_key)
        if ours:
            log.info("intake: running %d chat(s) with messages saved earlier", len(ours))
        return len(ours)

    def jobs(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        return [self.run]

    async def run(self) -> None:
        """The chats' loops, the lease renewal, the poll and the hints, until cancelled."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for chat_key, run in self._runs.items():
                    if run.task is None:
                        self._start(chat_key, run)
                tg.create_task(self._poll(), name="intake poll")
                tg.create_task(self._renew(), name="intake leases")
                tg.create_task(self._claim_requested(), name="intake claims")
                if self.hints is not None:
                    tg.create_task(self.hints.run(self._on_hint), name="intake hints")
        finally:
            self._tg = None

    async def close(self) -> None:
        """After the router drained: end the loops and give up every chat still held, with a
        hint, so other replicas take over now rather than after the lease."""
        self._closing = True
        for run in self._runs.values():
            run.wake.set()
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        held, self._runs = list(self._runs), {}
        if held:
            await self._give_up(held)

    # --- holding chats ---------------------------------------------------------------------

    def _hold(self, chat_key: str) -> None:
        run = self._runs.get(chat_key)
        if run is not None:
            run.gen += 1
            run.wake.set()
            return
        self._runs[chat_key] = run = _Run()
        if self._tg is not None:
            self._start(chat_key, run)

    def _start(self, chat_key: str, run: _Run) -> None:
        assert self._tg is not None
        run.task = self._tg.create_task(self._run_chat(chat_key, run), name=f"chat {chat_key}")

    def _drop(self, chat_key: str, run: _Run) -> None:
        if self._runs.get(chat_key) is run:
            del self._runs[chat_key]

    async def _run_chat(self, chat_key: str, run: _Run) -> None:
        finished: int | None = None
        failing = False
        try:
            while not self._stopping():
                gen = run.gen
                run.wake.clear()
                try:
                    step = await self.claims.next(
                        chat_key, replica=self.replica, finished=finished,
                        lease_until=self._lease_until(),
                    )  # fmt: skip
                except VaultError as exc:  # retried at the next poll or hint
                    if not failing:
                        log.warning("intake: chat %s waits for the vault: %s", chat_key, exc)
                    failing = True
                    await run.wake.wait()
                    continue
                finished, failing = None, False
                for row_id in step.rejected:
                    log.warning("intake: saved message %d cannot be read: rejected", row_id)
                if step.state is Next.RUN and step.row is not None:
                    ended = await self._run_one(run, step.row)
                    if ended is None:
                        return
                    if ended is TurnEnd.DEFERRED:  # the vault went away: run it again after
                        await run.wake.wait()  # the next poll or hint finds the vault back
                        continue
                    finished = step.row.id
                elif step.state is Next.BUSY:
                    await run.wake.wait()
                elif step.state is Next.LOST:
                    log.warning("intake: chat %s was taken over by another replica", chat_key)
                    self._drop(chat_key, run)
                    return
                elif run.gen == gen:  # released, and nobody claimed it for us since
                    self._drop(chat_key, run)
                    return
        except Exception:
            log.exception("intake: the loop of chat %s failed; the next poll takes it up", chat_key)
            self._drop(chat_key, run)
        finally:
            if finished is not None:
                self.store.finish_soon(finished)
            for future, _ in run.waiting.values():
                future.cancel()
            run.waiting.clear()

    async def _run_one(self, run: _Run, row: Pending) -> TurnEnd | None:
        """Run one message through the router; None when the stop cut it off. A deferred turn
        (the vault went away) keeps the row pending; the channel's future is settled either
        way (it was saved, which is all a channel waits for)."""
        future, fresh = run.waiting.pop(row.id, (None, False))
        if self._stopping():
            if future is not None:
                run.waiting[row.id] = (future, fresh)
            return None
        if not fresh:
            self.metrics.intake.inc("replayed")
        turn = self.router.submit(row.inbound, replay=not fresh)
        if future is not None:
            turn.add_done_callback(lambda t: mirror(future, t))
        await asyncio.wait([turn])  # a cancelled loop leaves the turn to the router's drain
        return None if turn.cancelled() else turn.result()

    # --- finding chats nobody runs ---------------------------------------------------------

    def _request(self, chats: Sequence[str]) -> None:
        # Scans come filtered by the query; hints name any chat with news.
        wanted = [c for c in chats if c not in self._runs and self.serves(c)]
        if wanted and not self._stopping():
            self._to_claim.update(wanted)
            self._claim_wake.set()

    async def _claim_requested(self) -> None:
        while True:
            await self._claim_wake.wait()
            self._claim_wake.clear()
            chats = [c for c in self._to_claim if c not in self._runs]
            self._to_claim.clear()
            if not chats or self._stopping():
                continue
            try:
                claimed = await self.claims.claim(
                    chats, replica=self.replica, running=set(self._runs),
                    now_ms=self.clock.now_ms(), lease_until=self._lease_until(),
                )  # fmt: skip
            except VaultError as exc:
                log.warning("intake: cannot claim chats: %s", exc)
                continue
            ours = [chat_key for chat_key, outcome in claimed.items() if outcome in OURS]
            if ours and self._stopping():  # claimed while the stop began: give them back
                await self._give_up(ours)
                continue
            for chat_key in ours:
                self._hold(chat_key)

    async def _give_up(self, chats: list[str]) -> None:
        try:
            await self.claims.release(chats, replica=self.replica)
        except VaultError as exc:  # their leases expire instead
            log.warning("intake: could not give up %d chat(s): %s", len(chats), exc)

    async def _scan(self) -> None:
        try:
            chats = await self.claims.claimable(
                replica=self.replica, now_ms=self.clock.now_ms(), channels=self.served
            )
        except VaultError as exc:
            if not self._scan_failing:
                log.warning("intake: cannot look for chats to run: %s", exc)
            self._scan_failing = True
            return
        self._scan_failing = False
        self._request(chats)
        for run in self._runs.values():  # a loop waiting after BUSY or an error looks again
            run.wake.set()

    async def _poll(self) -> None:
        while True:
            await self.clock.sleep(self.poll_s)
            await self._scan()

    async def _renew(self) -> None:
        while True:
            await self.clock.sleep(self.lease_s / 3)
            chats = list(self._runs)
            if not chats:
                continue
            try:
                await self.claims.renew(
                    chats, replica=self.replica, lease_until=self._lease_until()
                )
            except VaultError as exc:
                log.warning("intake: cannot renew the leases of %d chat(s): %s", len(chats), exc)

    def _on_hint(self, payload: str) -> None:
        if not payload:  # (re)connected: hints may have been missed
            if self._tg is not None:
                self._tg.create_task(self._scan(), name="intake rescan")
            return
        try:
            data = json.loads(payload)
            chat_key, holder = str(data["chat"]), str(data.get("holder", ""))
        except (ValueError, KeyError, TypeError):
            log.warning("intake: unreadable hint ignored")
            return
        run = self._runs.get(chat_key)
        if run is not None:
            run.wake.set()
        elif not holder or holder == self.replica:  # a live holder runs it otherwise
            self._request([chat_key])
