"""Read-only context shared by the items of one tick: quota counts, engagement, memories.

Reading the quota counts and the engagement rate for every item costs a vault round trip each;
a tick reads them once (the counts for all of its users in one query) and keeps the counts up
to date in memory as its own items start and fail deliveries. The same send times give the
user's last proactive message, for the spacing: they are read back far enough to cover both
the user's local day and the spacing window. A user's memories and
engagement rate are read once per tick (the chat's recent messages are not cached: they
change as the tick's own messages go out). These numbers only steer the
policy and the gate's prompt: the quota is enforced inside the transaction that writes the
outbox row (`begin_delivery`), so a count that is stale — another engine sending at the same
time, two items of one user racing for the last slot — can cost a wasted gate call and a
reschedule, never a message over the quota.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from proactive.policy import QuotaCounts, UserPrefs
from vault.proactive.log import ProactiveLog


@dataclass
class TickCache:
    plog: ProactiveLog
    _global_since: int | None = None
    _global: int = 0
    _floor: dict[int, int] = field(default_factory=dict)  # user -> sends known since
    _sends: dict[int, list[int]] = field(default_factory=dict)  # user -> counted sent_at
    _rates: dict[int, float | None] = field(default_factory=dict)
    _memories: dict[int, list[str]] = field(default_factory=dict)
    prefs: dict[int, UserPrefs] = field(default_factory=dict)  # the executor's, per user

    def seed(
        self, *, since_ms: int, sends: dict[int, list[int]], global_since_ms: int, global_sends: int
    ) -> None:
        """Counts read with the claim: every user's sends since `since_ms`, everyone's since
        the UTC day's start (`prefetch` then reads only what they do not cover)."""
        for user, times in sends.items():
            self._remember(user, since_ms, times)
        self._global_since, self._global = global_since_ms, global_sends

    async def prefetch(self, since_by_user: Iterable[tuple[int, int]]) -> None:
        """Load the counted sends of every (user, since) in one read."""
        wanted = dict(since_by_user)
        missing = [u for u, since in wanted.items() if self._floor.get(u, since + 1) > since]
        if not missing:
            return
        floor = min(wanted[u] for u in missing)
        found = await self.plog.send_times(missing, floor)
        for user, times in found.items():
            self._remember(user, floor, times)

    def _remember(self, user: int, floor: int, times: list[int]) -> None:
        if self._floor.get(user, floor + 1) > floor:  # never replace a fuller record
            self._floor[user] = floor
            self._sends[user] = times

    async def counts(
        self, user: int, *, day_start_ms: int, since_ms: int, global_since_ms: int
    ) -> QuotaCounts:
        """The user's sends since their local `day_start_ms`, everyone's since the UTC day's
        start, and the user's last send at or after `since_ms` (the earlier of the day start
        and the spacing window's start)."""
        await self.global_today(global_since_ms)
        since = min(since_ms, day_start_ms)
        if self._floor.get(user, since + 1) > since:
            found = await self.plog.send_times([user], since)
            self._remember(user, since, found[user])
        sends = self._sends[user]
        mine = sum(1 for at in sends if at >= day_start_ms)
        return QuotaCounts(user_today=mine, global_today=self._global,
                           last_send_ms=max(sends, default=None))  # fmt: skip

    async def global_today(self, global_since_ms: int) -> int:
        """Quota-counted sends of everyone since `global_since_ms` (the UTC day's start)."""
        if self._global_since != global_since_ms:
            self._global = await self.plog.sends_since(user=None, since_ms=global_since_ms)
            self._global_since = global_since_ms
        return self._global

    def started(self, user: int, sent_at: int) -> None:
        """One of this tick's items wrote its log row (it counts from now on)."""
        if user in self._sends:
            self._sends[user].append(sent_at)
        if self._global_since is not None and sent_at >= self._global_since:
            self._global += 1

    def failed(self, user: int, sent_at: int) -> None:
        """That delivery failed for certain: it no longer counts against a quota."""
        sends = self._sends.get(user)
        if sends is not None and sent_at in sends:
            sends.remove(sent_at)
        if self._global_since is not None and sent_at >= self._global_since:
            self._global = max(0, self._global - 1)

    def rate_known(self, user: int) -> bool:
        return user in self._rates

    def memories_known(self, user: int) -> bool:
        return user in self._memories

    async def memories(self, user: int, load: Callable[[int], Awaitable[list[str]]]) -> list[str]:
        if user not in self._memories:
            self._memories[user] = await load(user)
        return self._memories[user]

    async def engagement_rate(self, user: int, now_ms: int) -> float | None:
        if user not in self._rates:
            self._rates[user] = await self.plog.engagement_rate(user, now_ms)
        return self._rates[user]
