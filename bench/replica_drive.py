"""The platforms' side of `bench/replicas.py`: deliveries to the replicas and the verdict.

Message n goes to chat n mod chats (the first half Telegram private chats, the second Slack
DMs) as a Telegram webhook update or a signed Slack event, to the next live replica
round-robin. A chat's messages go one after the other (the next waits for the previous 200);
anything but a 200 is redelivered to another live replica 0.2 s later, the same update or
event (Slack's with its retry headers), as the platforms redeliver — so a replica killed
after saving but before answering is redelivered to, and the dedupe keys must hold.

The verdict reads the fakes' ledger and the outbox's uncertain rows: lost = acknowledged, never
answered, and no uncertain reply for it; duplicates = answered more than once; out of order =
a reply in a chat answering an older message than one already answered there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter, defaultdict
from types import TracebackType
from typing import Self

import aiohttp

from bench.common import percentile
from bench.replica_fakes import ECHO, REMINDER, World
from bench.replica_procs import SIGNING_SECRET, WEBHOOK_SECRET, Replica
from tests.fakes.slack import dm_event, event_body, signed_headers

FIRST_TELEGRAM = 1000
RETRY_S = 0.2
GIVE_UP_S = 300.0


class Driver:
    def __init__(self, replicas: list[Replica], world: World, *, chats: int) -> None:
        self.replicas, self.world, self.chats = replicas, world, chats
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))
        self.fed = 0
        self.first_sent: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self.never_acked: list[int] = []
        self.refusals: Counter[str] = Counter()
        self.redeliveries = 0
        self._turn = itertools.count()
        self._queues: list[asyncio.Queue[int]] = [asyncio.Queue() for _ in range(chats)]
        self._tasks: list[asyncio.Task[None]] = []
        self._all_acked = asyncio.Event()  # every message fed is acknowledged or given up
        self._all_acked.set()

    async def __aenter__(self) -> Self:
        self._tasks = [asyncio.create_task(self._chat(c)) for c in range(self.chats)]
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.session.close()

    def chat_key(self, c: int) -> str:
        if c < self.chats // 2 or self.chats == 1:
            return f"telegram:{FIRST_TELEGRAM + c}"
        return f"slack:D{c}"

    def feed(self, count: int, *, rate: float | None) -> None:
        """Queue `count` more messages at once (a burst)."""
        self._all_acked.clear()
        for _ in range(count):
            self._queues[self.fed % self.chats].put_nowait(self.fed)
            self.fed += 1

    async def paced(self, rate: float, cap: int | None, *, until: float) -> None:
        """Queue messages at `rate` per second until `until` (monotonic) or `cap` messages."""
        start = time.monotonic()
        while time.monotonic() < until and (cap is None or self.fed < cap):
            due = int((time.monotonic() - start) * rate) + 1
            while self.fed < due and (cap is None or self.fed < cap):
                self.feed(1, rate=rate)
            await asyncio.sleep(0.02)
        await self.idle()

    async def idle(self) -> None:
        """Until every queued message is acknowledged (or given up)."""
        await self._all_acked.wait()

    def _settled(self) -> None:
        if len(self.acked) + len(self.never_acked) >= self.fed:
            self._all_acked.set()

    async def live(self) -> Replica:
        while True:
            live = [r for r in self.replicas if r.up.is_set()]
            if live:
                return live[next(self._turn) % len(live)]
            waits = [asyncio.create_task(r.up.wait()) for r in self.replicas]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def known_chats(self) -> list[str]:
        """Chats that have written at least once (so their user exists)."""
        return [self.chat_key(c) for c in range(min(self.chats, len(self.acked)))]

    async def _chat(self, c: int) -> None:
        queue = self._queues[c]
        while True:
            n = await queue.get()
            await self._deliver(n, c)

    async def _deliver(self, n: int, c: int) -> None:
        chat = self.chat_key(c)
        started, at = time.monotonic(), int(time.time())  # `at`: the message's own time
        self.first_sent[n] = started
        for attempt in itertools.count():
            replica = await self.live()
            url, body, headers = self._request(n, chat, replica, attempt, at)
            try:
                async with self.session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status == 200:
                        self.acked[n] = time.monotonic()
                        self._settled()
                        return
                    self.refusals[f"HTTP {response.status}"] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.refusals[type(exc).__name__] += 1
            self.redeliveries += 1
            if time.monotonic() - started > GIVE_UP_S:
                self.never_acked.append(n)
                self._settled()
                return
            await asyncio.sleep(RETRY_S)  # the platform's redelivery delay, shortened

    def _request(
        self, n: int, chat: str, replica: Replica, attempt: int, at: int
    ) -> tuple[str, str, dict[str, str]]:
        platform, _, chat_id = chat.partition(":")
        if platform == "telegram":
            user = {"id": int(chat_id), "is_bot": False, "first_name": f"u{chat_id}"}
            message = {"message_id": n + 1, "date": at, "text": f"n{n}",
                       "chat": {"id": int(chat_id), "type": "private"}, "from": user}  # fmt: skip
            body = json.dumps({"update_id": n + 1, "message": message})
            headers = {"content-type": "application/json",
                       "x-telegram-bot-api-secret-token": WEBHOOK_SECRET}  # fmt: skip
            return f"{replica.base}/telegram/webhook", body, headers
        event = dm_event(f"n{n}", user=f"U{chat_id[1:]}", ts=f"{at}.{n % 1_000_000:06d}")
        body = event_body(event | {"channel": chat_id}, event_id=f"Ev{n}")
        headers = signed_headers(body, secret=SIGNING_SECRET, content_type="application/json")
        if attempt:
            headers |= {"x-slack-retry-num": str(attempt), "x-slack-retry-reason": "timeout"}
        return f"{replica.base}/slack/events", body, headers

    # --- the verdict ---------------------------------------------------------------------

    def answered(self) -> int:
        return len(self.world.ledger.answers())

    def latencies_ms(self) -> list[float]:
        return [
            (replies[0].at - self.first_sent[n]) * 1000
            for n, replies in self.world.ledger.answers().items()
            if n in self.first_sent
        ]

    def missing(self, uncertain: set[int]) -> set[int]:
        return set(self.acked) - set(self.world.ledger.answers()) - uncertain

    def report(self, uncertain: set[int]) -> bool:
        answers = self.world.ledger.answers()
        lost = sorted(self.missing(uncertain))
        doubled = {n: len(rs) for n, rs in answers.items() if len(rs) > 1}
        wrong_chat = [n for n, rs in answers.items() if rs[0].chat != self.chat_key(n % self.chats)]
        disorder = self._out_of_order()
        lat = self.latencies_ms()
        print(
            f"  {self.fed} messages: {len(self.acked)} acknowledged "
            f"({self.redeliveries} redeliveries: {dict(self.refusals.most_common(4))}), "
            f"{len(self.never_acked)} never acknowledged, {len(answers)} answered; "
            f"latency p50 {percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms"
        )
        examples_lost = [(n, self.chat_key(n % self.chats)) for n in lost[:10]]
        print(f"  inbound lost: {len(lost)} {examples_lost}")
        print(f"  replies out of order within a chat: {len(disorder)} {disorder[:5]}")
        examples = [(n, [(r.replica, r.chat) for r in answers[n]]) for n in list(doubled)[:5]]
        print(f"  duplicate replies: {len(doubled)} {examples}")
        print(f"  uncertain sends: {len(uncertain)} {sorted(uncertain)[:20]}")
        if wrong_chat:
            print(f"  replies in the wrong chat: {len(wrong_chat)} {wrong_chat[:5]}")
        return not (lost or doubled or disorder or wrong_chat or self.never_acked)

    def _out_of_order(self) -> list[tuple[str, int, int]]:
        """(chat, newest answered before, the older one answered after) per violation."""
        newest: dict[str, int] = {}
        found = []
        for reply in self.world.ledger.replies:
            if not (m := ECHO.fullmatch(reply.text)):
                continue
            n = int(m.group(1))
            if n < newest.get(reply.chat, -1):
                found.append((reply.chat, newest[reply.chat], n))
            newest[reply.chat] = max(n, newest.get(reply.chat, -1))
        return found


async def uncertain_of(db_url: str) -> tuple[set[int], set[int]]:
    """(message numbers, reminder numbers) whose reply ended uncertain in the outbox."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT text FROM outbox WHERE status = 'uncertain'")
        rows = await cursor.fetchall()
    messages: set[int] = set()
    reminders: set[int] = set()
    for (text,) in rows:
        if m := ECHO.fullmatch(text):
            messages.add(int(m.group(1)))
        elif m := REMINDER.fullmatch(text):
            reminders.add(int(m.group(1)))
    return messages, reminders


def by_replica(world: World) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for reply in world.ledger.replies:
        counts[reply.replica] += 1
    return dict(counts)
