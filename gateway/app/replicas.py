"""Part of the composition root: this process among the `iris run` replicas sharing the vault.

`Fleet` owns what being one of several replicas means for the app:
- Receiving that only one process may do — Telegram's `getUpdates` polling, Slack's Socket
  Mode connection (`role_of`) — runs under a leadership (`gateway/core/leadership.py`): on
  PostgreSQL the replica holding the role's advisory lock (`vault/pg/leader.py`) supervises
  the channel, the others stand by and take over when it is lost; on SQLite the one replica
  always leads. Sending never waits for it: every replica's channels send. A standby channel
  is healthy ("standby" in `/healthz`), since it delivers and another replica receives.
- Wake-up hints (PostgreSQL only): `hints(channel)` opens a LISTEN on its own connection
  (`vault/pg/notify.py`) for whoever needs one (the intake, the subscriptions' streams) and
  keeps it on the replica, so health shows whether it is up.
- Visibility: the replica id and the roles it leads in `/healthz` (`health_report`) and in
  `/metrics` (`iris_replica_info`, `iris_leadership`), and each hint listener
  (`iris_hints_listening`: 0 while that channel is down to polling).
- The heartbeat (PostgreSQL only): every 10 s a row with the id, start, last beat, the roles
  led and the counters (`vault/replicas.py`), so usage figures (`/admin stats`, `GET /stats`)
  add up the counters of the replicas seen in the last minute and list them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gateway.app.config import Config
from gateway.app.lifecycle import supervise
from gateway.core.errors import VaultError
from gateway.core.leadership import Leadership, SoleLeader
from gateway.core.messages import ChannelHealth
from gateway.core.metrics import LabelValues, Metrics
from gateway.core.ports import Channel, Clock, InboundHandler, ReportsHealth
from gateway.core.replica import Replica, new_replica_id
from gateway.features.contributions import BackgroundJob
from gateway.turns.shared_intake import Hints
from vault.db import Vault
from vault.replicas import Beat, ReplicaStore, total

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
LIVE_MS = 60_000  # a replica counts as running when it beat within the last minute


def role_of(config: Config, channel: str) -> str | None:
    """The leadership a channel's receiving needs, if only one process may receive that way."""
    s = config.settings
    if channel == "telegram" and s.telegram.mode == "polling":
        return "telegram-polling"
    if channel == "slack" and s.slack.mode == "socket":
        return "slack-socket-mode"
    return None


class Fleet:
    def __init__(
        self,
        *,
        replica: Replica,
        leadership: Leadership,
        store: ReplicaStore | None,
        metrics: Metrics,
        clock: Clock,
        role_of: Callable[[str], str | None],
        hints_url: str = "",
    ) -> None:
        self.replica = replica
        self.leadership = leadership
        self.store = store  # None: SQLite, one replica, no heartbeat
        self._metrics = metrics
        self._clock = clock
        self._role_of = role_of
        self._hints_url = hints_url  # "": SQLite, no other replica to hear from
        self._roles: dict[str, str] = {}  # channel name -> the role its receiving runs under
        self._standby: set[str] = set()  # channels waiting for their role
        self.started_ms = clock.now_ms()
        self._register_metrics()

    # --- receiving -------------------------------------------------------------------------

    async def receive(self, channel: Channel, submit: InboundHandler) -> None:
        """Supervise `channel`'s receiving; under its role's leadership when it needs one."""
        role = self._role_of(channel.name)
        if role is None:
            await supervise(channel, submit, self._clock)
            return
        self._roles[channel.name] = role
        while True:
            self._standby.add(channel.name)
            async with self.leadership.hold(role) as lost:
                self._standby.discard(channel.name)
                if await self._run_until_lost(channel, submit, lost):
                    return  # the channel ended by itself
            log.warning("replica %s: %s lost; %s stops receiving and stands by",
                        self.replica.id, role, channel.name)  # fmt: skip

    async def _run_until_lost(
        self, channel: Channel, submit: InboundHandler, lost: asyncio.Event
    ) -> bool:
        """Whether the channel ended on its own (rather than the leadership being lost)."""
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(supervise(channel, submit, self._clock))
            losing = tg.create_task(lost.wait())
            await asyncio.wait([running, losing], return_when=asyncio.FIRST_COMPLETED)
            running.cancel()
            losing.cancel()
        return not lost.is_set()

    def health(self, channel: ReportsHealth) -> ChannelHealth:
        name = getattr(channel, "name", "")
        if name not in self._standby:
            return channel.health()
        return ChannelHealth(
            channel=name,
            connected=True,
            detail=f"standby: another replica holds {self._roles[name]}; this one sends",
        )

    # --- hints -----------------------------------------------------------------------------

    def hints(self, channel: str) -> Hints | None:
        """A listener for `channel`'s wake-up hints (None on SQLite); its state goes to health."""
        if not self._hints_url:
            return None
        from vault.pg.notify import Notifications  # psycopg: the `postgres` extra

        found = Notifications(self._hints_url, channel, sleep=self._clock.sleep)  # backoff
        self.replica.hints[channel] = found.listening
        return found

    # --- visibility ------------------------------------------------------------------------

    def _register_metrics(self) -> None:
        replica, roles = self.replica, self._roles

        async def info() -> dict[LabelValues, float]:
            return {(replica.id,): 1.0}

        async def led() -> dict[LabelValues, float]:
            return {(role,): float(role in replica.leaderships) for role in roles.values()}

        async def listening() -> dict[LabelValues, float]:
            return {(name,): float(up.is_set()) for name, up in replica.hints.items()}

        self._metrics.gauge("iris_replica_info", "This replica's id (always 1).",
                            ("replica",), info)  # fmt: skip
        self._metrics.gauge("iris_leadership", "1 while this replica leads the role (only "
                            "the leader receives through it), else 0.", ("role",), led)  # fmt: skip
        self._metrics.gauge("iris_hints_listening", "1 while this replica listens for the "
                            "channel's wake-up hints (LISTEN), 0 while it only polls.",
                            ("channel",), listening)  # fmt: skip

    def jobs(self) -> list[BackgroundJob]:
        return [self.heartbeat] if self.store is not None else []

    def beat(self) -> Beat:
        return Beat(
            id=self.replica.id,
            started_ms=self.started_ms,
            last_seen_ms=self._clock.now_ms(),
            leaderships=tuple(sorted(self.replica.leaderships)),
            counters=self._metrics.counter_values(),
        )

    async def heartbeat(self) -> None:
        assert self.store is not None
        failing, previous, told = False, None, False
        while True:
            try:
                beat = self.beat()
                other = await self.store.beat(beat, previous)
                previous = beat.last_seen_ms
                if other is not None and not told:
                    told = True
                    log.error(
                        "another process runs as replica %s (it started at %s): each replica "
                        "needs its own [vault] replica_id, or two of them run the same chats "
                        "at once", self.replica.id, _utc(other),
                    )  # fmt: skip
                if failing:
                    log.info("replica %s: heartbeat written again", self.replica.id)
                failing = False
            except VaultError as exc:
                if not failing:
                    log.warning("replica %s: heartbeat not written (%s)", self.replica.id, exc)
                failing = True
            await self._clock.sleep(HEARTBEAT_S)

    async def stats(self, now_ms: int) -> dict[str, Any]:
        """The replicas seen in the last minute and their counters added up; this replica's
        own figures are taken live rather than from its last beat."""
        me = self.beat()
        beats = [] if self.store is None else await self.store.seen_since(now_ms - LIVE_MS)
        beats = [*(b for b in beats if b.id != me.id), me]
        beats.sort(key=lambda b: b.id)
        return {
            "replicas": [
                {
                    "id": b.id,
                    "started_ms": b.started_ms,
                    "last_seen_ms": b.last_seen_ms,
                    "leaderships": list(b.leaderships),
                }
                for b in beats
            ],
            "counters": total(b.counters for b in beats),
        }


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def new_replica(config: Config) -> Replica:
    return Replica(new_replica_id(config.settings.vault.replica_id))


def open_fleet(
    config: Config, vault: Vault, metrics: Metrics, clock: Clock, replica: Replica
) -> Fleet:
    s = config.settings
    leadership: Leadership
    url = s.vault.url if vault.dialect == "postgresql" else ""
    if url:
        from vault.pg.leader import PgLeadership  # psycopg: the `postgres` extra

        leadership = PgLeadership(
            s.vault.url, replica=replica, clock=clock, retry_s=s.vault.leader_retry_s
        )
        store: ReplicaStore | None = ReplicaStore(vault)
    else:
        leadership, store = SoleLeader(replica), None
    log.info("replica %s", replica.id)
    return Fleet(replica=replica, leadership=leadership, store=store, metrics=metrics,
                 clock=clock, role_of=lambda channel: role_of(config, channel),
                 hints_url=url)  # fmt: skip
