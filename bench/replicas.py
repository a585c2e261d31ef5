"""Several `iris run` replicas on one PostgreSQL: is anything lost, doubled or reordered when
one of them is killed every 20 s, how fast does Telegram polling fail over, and what do 1, 2
and 3 replicas handle on this machine?

A throwaway PostgreSQL (pgserver), N `iris run` processes on it (Telegram in webhook mode and
Slack HTTP events, each replica on its own HTTP port), and this process playing the platforms
and the model (`bench/replica_fakes.py`: loopback fakes, every call attributed to its
replica). The driver writes from `--chats` chats (half Telegram, half Slack DMs), message n
to chat n mod chats, each delivery to the next live replica round-robin; a chat's next message
waits for the previous one's 200, as a platform keeps a chat's order. A refusal, an error or
a dead replica means redelivery to another replica after 0.2 s (Slack with its retry headers),
as the platforms do. Phases (`--phases`):

- throughput: `--burst` messages queued at once on 1, 2 and 3 fresh replicas; messages
  answered per second, latency (first delivery -> reply), the replicas' CPU per message.
- kill: 3 replicas, `--rate` messages/s for `--minutes` (or `--messages`), one replica killed
  with SIGKILL every `--kill-every` s and restarted at once; a reminder intent (due 100 s
  later) created through the admin HTTP API of a live replica every `--intent-every` s.
  Then it drains and prints: inbound lost (acknowledged, never answered, no uncertain reply),
  replies out of order within a chat, duplicate replies, uncertain sends (listed), reminders
  executed twice or missing.
- failover: 3 replicas in Telegram POLLING mode; the replica polling is killed, and the time
  until another replica polls successfully is the failover time (409 Conflicts, two pollers
  at once, are counted).

    python bench/replicas.py                          # all phases, 5 minutes of kills
    python bench/replicas.py --phases kill --minutes 0 --messages 10000 --rate 20
    python bench/replicas.py --smoke                  # 1 replica, a few messages, one kill

Every figure depends on the machine's load: the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import percentile
from bench.replica_drive import Driver, uncertain_of
from bench.replica_fakes import World
from bench.replica_procs import (
    API_TOKEN,
    Mode,
    Replica,
    create_database,
    postgres,
    postgres_cpu_s,
)

WEBHOOKS = Mode(telegram="webhook", slack=True)
DUE_S = 100  # a reminder falls due this long after its creation (the API wants >= 60 s)


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.asynccontextmanager
async def cluster(args: argparse.Namespace, admin_url: str, name: str, count: int, mode: Mode):  # type: ignore[no-untyped-def]
    """`count` replicas on a fresh database `name`, with a fresh world; all ended afterwards."""
    db_url = create_database(admin_url, name)
    world = World(model_delay_s=args.model_ms / 1000)
    await world.start()
    workdir = Path(args.workdir) / name
    replicas = [Replica(i, workdir, db_url, world.root, mode) for i in range(count)]
    try:
        for replica in replicas:
            await replica.start()
        async with asyncio.timeout(180):
            for replica in replicas:
                await replica.ready()
        yield db_url, world, replicas
    finally:
        for replica in replicas:
            await replica.end(kill=False)
        await world.close()


async def throughput(args: argparse.Namespace, admin_url: str, count: int) -> None:
    name = f"bench_t{count}"
    async with cluster(args, admin_url, name, count, WEBHOOKS) as (_, world, rs):
        driver = Driver(rs, world, chats=args.chats)
        async with driver:
            cpu_before = sum(r.cpu_now() for r in rs)  # start-up (imports, migrations) apart
            pg_before = postgres_cpu_s(admin_url)
            own_before = time.process_time()
            started = time.monotonic()
            driver.feed(args.burst, rate=None)
            done = await world.ledger.wait(lambda: driver.answered() >= args.burst, 600)
            elapsed = time.monotonic() - started
            cpu = sum(r.cpu_now() for r in rs) - cpu_before
            pg_cpu = postgres_cpu_s(admin_url) - pg_before
            own_cpu = time.process_time() - own_before
    answered = driver.answered()
    lat = driver.latencies_ms()
    print(
        f"  {count} replica{'s' if count > 1 else ' '}: {answered}/{args.burst} answered in "
        f"{elapsed:6.1f} s = {answered / elapsed:6.1f} msg/s, latency p50 "
        f"{percentile(lat, 50):7.0f} ms, p99 {percentile(lat, 99):7.0f} ms, replicas' CPU "
        f"{cpu / max(1, answered) * 1000:5.1f} ms/msg, PostgreSQL's "
        f"{pg_cpu / max(1, answered) * 1000:4.1f}, the fakes' "
        f"{own_cpu / max(1, answered) * 1000:4.1f}"
        + ("" if done else "  (TIMED OUT)")
        + f"  [{load()}]"
    )


async def kills(args: argparse.Namespace, admin_url: str) -> bool:
    name, count = "bench_kill", args.replicas
    async with cluster(args, admin_url, name, count, WEBHOOKS) as (db_url, world, replicas):
        async with Driver(replicas, world, chats=args.chats) as driver:
            stop = asyncio.Event()
            created: dict[int, float] = {}  # reminder k -> when it falls due
            failed: Counter[int] = Counter()  # creations refused (0: no answer)
            killed = 0

            async def killer() -> None:
                nonlocal killed
                while not stop.is_set() and (not args.max_kills or killed < args.max_kills):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), args.kill_every)
                    if stop.is_set():
                        return
                    # The next replica in turn that serves (one still starting is skipped).
                    ring = replicas[killed % len(replicas) :] + replicas[: killed % len(replicas)]
                    victim = next((r for r in ring if r.up.is_set()), None)
                    if victim is None:
                        continue
                    await victim.end(kill=True)
                    killed += 1
                    await victim.start()

            async def intents() -> None:
                k = 0
                while not stop.is_set() and args.intent_every > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), args.intent_every)
                    if known := driver.known_chats():
                        chat = known[k % len(known)]
                        due = datetime.now(UTC) + timedelta(seconds=DUE_S)
                        replica = await driver.live()
                        status = await create_intent(driver.session, replica, chat, k, due)
                        if status == 200:
                            created[k] = time.monotonic() + DUE_S
                        else:
                            failed[status] += 1
                        k += 1

            started = time.monotonic()
            limit_s = args.minutes * 60 if args.minutes else float("inf")
            print(f"  {count} replicas, {args.rate:g} msg/s, kill -9 every {args.kill_every} s")
            async with asyncio.TaskGroup() as tg:
                tg.create_task(killer())
                tg.create_task(intents())
                await driver.paced(args.rate, args.messages or None, until=started + limit_s)
                stop.set()
            sent_s = time.monotonic() - started
            print(f"  load: {driver.fed} messages in {sent_s:.0f} s, {killed} kills [{load()}]")
            last_due = max(created.values(), default=0.0)

            def settled(unc: set[int], unc_p: set[int]) -> Callable[[], bool]:
                def check() -> bool:
                    due = {k for k, at in created.items() if at <= time.monotonic() + 5}
                    sent = set(world.ledger.reminders())
                    return not driver.missing(unc) and due - sent - unc_p == set()

                return check

            drain_until = max(time.monotonic() + 60, last_due + 30)
            while time.monotonic() < drain_until:
                unc, unc_p = await uncertain_of(db_url)
                if await world.ledger.wait(settled(unc, unc_p), 2.0) and time.monotonic() > (
                    last_due + 5
                ):
                    break
            drained_s = time.monotonic() - started - sent_s
        print(f"  drained {drained_s:.0f} s after the load ended")
        unc, unc_p = await uncertain_of(db_url)
        ok = driver.report(unc)
        reminders = world.ledger.reminders()
        twice = {k: n for k, n in reminders.items() if n > 1}
        missing = sorted(set(created) - set(reminders) - unc_p)
        print(
            f"  reminders: {len(created)} created through the API (not created, by status: "
            f"{dict(failed)}), {sum(1 for k in created if k in reminders)} sent, executed twice: "
            f"{len(twice)} {sorted(twice.items())[:5]}, missing: {len(missing)} {missing[:5]}, "
            f"uncertain: {sorted(unc_p)[:10]}"
        )
        for r in replicas:
            if r.warnings:
                print(f"  r{r.index}: {r.warnings} warnings/errors logged, first: {r.first_errors}")
    return ok and not twice and not missing


async def create_intent(
    session: aiohttp.ClientSession, replica: Replica, chat: str, k: int, due: datetime
) -> int:
    """The HTTP status of the creation (0: no answer)."""
    platform, _, chat_id = chat.partition(":")
    user = f"slack:U{chat_id[1:]}" if platform == "slack" else chat
    body = {"user": user, "chat": chat, "what": f"p{k}", "kind": "user_reminder",
            "at": due.isoformat(timespec="seconds")}  # fmt: skip
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    try:
        async with session.post(
            f"{replica.base}/proactive/intent", json=body, headers=headers
        ) as response:
            if response.status != 200 and response.status < 500:
                print(f"    intent p{k}: HTTP {response.status} {(await response.text())[:200]}")
            return response.status
    except (aiohttp.ClientError, TimeoutError):
        return 0  # no answer: the intent may exist; if it is sent, it is sent once


async def failover(args: argparse.Namespace, admin_url: str) -> None:
    mode = Mode(telegram="polling", slack=False)
    async with cluster(args, admin_url, "bench_poll", 3, mode) as (_, world, replicas):
        polls = world.ledger.polls
        times: list[float] = []
        for round_ in range(args.failovers):
            mark = len(polls)
            await world.ledger.wait(lambda m=mark: any(ok for _, _, ok in polls[m:]), 60)
            await asyncio.sleep(3)  # steady state: who polls now (observation, not sync)
            recent = [(at, r) for at, r, ok in polls[mark:] if ok]
            pollers = sorted({r for _, r in recent[-20:]})
            leader = recent[-1][1] if recent else 0
            conflicts = world.conflicts
            killed_at = time.monotonic()
            await replicas[leader].end(kill=True)
            mark = len(polls)
            took = await world.ledger.wait(
                lambda m=mark, lead=leader: any(ok and r != lead for _, r, ok in polls[m:]), 90
            )
            at = next((a for a, r, ok in polls[mark:] if ok and r != leader), None)
            dt = (at - killed_at) if (took and at is not None) else float("inf")
            times.append(dt)
            print(
                f"  failover {round_ + 1}: pollers before {pollers}, killed r{leader}, another "
                f"polled after {dt:.1f} s; 409 conflicts so far {conflicts} [{load()}]"
            )
            await replicas[leader].start()
            await replicas[leader].ready()
        print(f"  failover time: max {max(times):.1f} s; 409 conflicts in all {world.conflicts}")


async def main(args: argparse.Namespace) -> int:
    phases = set(args.phases.split(","))
    ok = True
    with tempfile.TemporaryDirectory(prefix="iris-replicas-") as tmp, postgres() as admin_url:
        args.workdir = args.workdir or tmp
        print(f"replicas bench: {args.chats} chats, model {args.model_ms:g} ms [{load()}]")
        if "throughput" in phases:
            print("throughput (a burst queued at once):")
            for count in range(1, args.replicas + 1):
                await throughput(args, admin_url, count)
        if "kill" in phases:
            print("kill -9 under load:")
            ok = await kills(args, admin_url)
        if "failover" in phases:
            print("leader failover (Telegram polling):")
            await failover(args, admin_url)
    print("nothing lost, doubled or reordered" if ok else "FAILED: see above")
    return 0 if ok else 1


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="throughput,kill,failover")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--burst", type=int, default=400, help="messages per throughput run")
    parser.add_argument("--minutes", type=float, default=5.0, help="kill phase length (0: none)")
    parser.add_argument("--messages", type=int, default=0, help="kill phase cap (0: none)")
    parser.add_argument("--rate", type=float, default=5.0, help="kill phase, messages/s")
    parser.add_argument("--kill-every", type=float, default=20.0)
    parser.add_argument("--max-kills", type=int, default=0, help="0: no limit")
    parser.add_argument("--intent-every", type=float, default=3.0, help="0: no reminders")
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--model-ms", type=float, default=50.0)
    parser.add_argument("--workdir", default="", help="keep configs and logs here")
    parser.add_argument("--smoke", action="store_true", help="1 replica, a few messages")
    args = parser.parse_args(argv)
    if args.smoke:
        args.phases, args.replicas, args.chats = "kill", 1, 6
        args.messages, args.rate, args.intent_every = 24, 12.0, 0.0
        args.kill_every, args.max_kills = 1.0, 1
        args.model_ms = 0.0
    return args


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.exit(asyncio.run(main(arguments())))
