"""kill -9 during a burst: `iris run` is killed at random points and restarted, again and
again, while Telegram updates (a loopback Bot API) or signed Slack events (retried until they
get a 200, as Slack does) keep arriving; every message is answered exactly once, in order per
chat. The kills land at a random moment, or right after a delivery was handed over (Telegram
gave out a batch, Slack got its 200) — before Iris could have done more than save it.

"Exactly once" has one honest exception, and the tests check it is visible: a kill while a
reply's request is in flight leaves that send `uncertain` (it may or may not have reached the
platform, which offers no way to ask), and an uncertain send is never repeated. So: no message
is answered twice, and every message not answered has an uncertain reply in the outbox — none
is lost silently. The tests print how many sends ended uncertain.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.child import Child
from tests.fakes.bot_api_server import BotAPIServer, Sent
from tests.fakes.echo_model import echo_model
from tests.fakes.slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlackAPI,
    dm_event,
    event_body,
    running_fake_slack,
    signed_headers,
)

KILLS = 50
CHATS = 20
PER_ROUND = 8
# The echo model answers with the last user text: "n<k>", or several of them joined by blank
# lines when earlier ones of the chat got no reply in the history (theirs was uncertain). The
# reply answers the last one.
# A replayed message answered a minute or more after it was sent starts with a note.
LATE = r"(?:\(Answering your message from [^\n]*\)\n\n)?"
ECHO = re.compile(LATE + r"echo: (?:n\d+\n\n)*n(\d+)")


async def kill_point(
    rng: random.Random, cond: asyncio.Condition, handed: Callable[[], int], due: Callable[[], int]
) -> None:
    """Returns when this round's kill should land: right after the next hand-over (of the
    `due()` this run will hand over), or at a random moment of the run (the point of the test,
    not a synchronization)."""
    if rng.random() < 0.3 and handed() < due():
        mark = handed()
        async with asyncio.timeout(30), cond:
            await cond.wait_for(lambda: handed() > mark or handed() >= due())
    else:
        await asyncio.sleep(rng.uniform(0.05, 0.8))


def uncertain(db: Path) -> set[int]:
    """The n of every message whose reply ended uncertain (read after the runs settled)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT text FROM outbox WHERE status = 'uncertain'").fetchall()
    return {int(m.group(1)) for (text,) in rows if (m := re.fullmatch(ECHO, text))}


def check(
    expected: Mapping[int, object], replies: Sequence[tuple[int, object]], unsure: set[int]
) -> None:
    counts = Counter(n for n, _ in replies)
    assert [n for n, k in counts.items() if k > 1] == [], "answered twice"
    assert set(expected) - set(counts) - unsure == set(), "lost without a trace"
    by_chat: dict[object, list[int]] = defaultdict(list)
    for n, chat in replies:
        assert expected[n] == chat
        by_chat[chat].append(n)
    assert all(ns == sorted(ns) for ns in by_chat.values()), "out of order within a chat"
    print(f"{len(expected)} messages, {len(unsure)} sends uncertain after kills")


@pytest.mark.slow
async def test_telegram_sigkill_during_a_burst_loses_and_doubles_nothing(tmp_path: Path) -> None:
    rng = random.Random(20261123)
    expected: dict[int, int] = {}  # n (the message says "n<n>") -> chat
    with echo_model() as model_url:
        async with BotAPIServer() as api:
            config = tmp_path / "config.toml"
            config.write_text(
                f'[vault]\npath = "{tmp_path / "iris.db"}"\n[auth]\nallow = ["telegram:*"]\n'
                f'[telegram]\nenabled = true\nbase_url = "{api.base_url}"\n'
                "[proactive]\nenabled = false\n"
            )
            child = Child(
                config,
                {"ANTHROPIC_API_KEY": "k", "IRIS_LLM__BASE_URL": model_url,
                 "TELEGRAM_BOT_TOKEN": "123:test-token"},
            )  # fmt: skip

            def answered() -> set[int]:
                return {n for n, _ in echoed(api.sent)}

            for _ in range(KILLS):
                for _ in range(PER_ROUND):
                    chat = rng.randrange(CHATS) + 1
                    n = len(expected)
                    expected[n] = chat
                    api.add_message(chat_id=chat, text=f"n{n}")
                await child.start()
                await kill_point(
                    rng, api.changed, lambda: api.handed_out, lambda: api.handed_out + 1
                )
                assert await child.stop(kill=True) == -9
            await child.start()
            await child.serving()  # interrupted sends are settled (uncertain) by now
            unsure = uncertain(tmp_path / "iris.db")
            async with asyncio.timeout(120):
                await api.wait(lambda: answered() >= set(expected) - unsure)
            assert await child.stop(kill=False) == 0, child.log.read_text()[-3000:]
    check(expected, echoed(api.sent), unsure)


def echoed(sent: list[Sent]) -> list[tuple[int, int]]:
    """(n, chat) of every reply to a message "n<n>", in the order they were sent."""
    found = []
    for message in sent:
        match = re.fullmatch(ECHO, message.text)
        if match:
            found.append((int(match.group(1)), message.chat_id))
    return found


class SlackSender:
    """Posts signed events one at a time; a post that gets no 200 is retried (with Slack's
    retry headers) once the next `iris run` serves, as Slack retries until it is acked."""

    def __init__(self, child: Child, api: FakeSlackAPI, port: int, rng: random.Random) -> None:
        self.child, self.api, self.rng = child, api, rng
        self.url = f"http://127.0.0.1:{port}/slack/events"
        self.acked = 0
        self.expected: dict[int, str] = {}  # n -> channel

    async def run(self, count: int) -> None:
        async with aiohttp.ClientSession() as session:
            for n in range(count):
                channel = f"D{self.rng.randrange(CHATS) + 1}"
                self.expected[n] = channel
                await self._post(session, channel, n)

    async def _post(self, session: aiohttp.ClientSession, channel: str, n: int) -> None:
        event = dm_event(f"n{n}", ts=f"{int(time.time())}.{n:06d}") | {"channel": channel}
        body = event_body(event, event_id=f"Ev{n}")
        for attempt in range(KILLS * 2):
            # A burst of PER_ROUND new events per run; retries go to whichever run serves.
            run = await self.child.serving(at_least=n // PER_ROUND + 1)
            headers = signed_headers(body, content_type="application/json")
            if attempt:
                headers |= {"x-slack-retry-num": str(attempt), "x-slack-retry-reason": "timeout"}
            try:
                async with session.post(self.url, data=body, headers=headers) as response:
                    if response.status == 200:
                        self.acked += 1
                        async with self.api.changed:
                            self.api.changed.notify_all()
                        return
                # Up but not taking events yet (the channel is still connecting): Slack's
                # retry comes after a delay; a short one here.
                await asyncio.sleep(0.05)
            except aiohttp.ClientError:  # down: the retry goes to the next run
                await self.child.ended(run)
        raise AssertionError(f"event {n} was never acked")


@pytest.mark.slow
async def test_slack_sigkill_during_a_burst_loses_and_doubles_nothing(tmp_path: Path) -> None:
    rng = random.Random(1123)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with echo_model() as model_url:
        async with running_fake_slack() as api:
            config = tmp_path / "config.toml"
            config.write_text(
                f'[vault]\npath = "{tmp_path / "iris.db"}"\n[auth]\nallow = ["slack:*"]\n'
                f'[slack]\nenabled = true\nmode = "http"\napi_url = "{api.url}/api/"\n'
                f"[http]\nenabled = true\nport = {port}\n[proactive]\nenabled = false\n"
            )
            child = Child(
                config,
                {"ANTHROPIC_API_KEY": "k", "IRIS_LLM__BASE_URL": model_url,
                 "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET},
            )  # fmt: skip
            sender = SlackSender(child, api, port, rng)
            sending = asyncio.create_task(sender.run(KILLS * PER_ROUND))
            for _ in range(KILLS):
                await child.start()
                await child.serving()
                await kill_point(
                    rng, api.changed, lambda: sender.acked, lambda: child.runs * PER_ROUND
                )
                assert await child.stop(kill=True) == -9
            await child.start()
            await child.serving()  # interrupted sends are settled (uncertain) by now
            async with asyncio.timeout(120):
                await sending
            unsure = uncertain(tmp_path / "iris.db")
            wanted = set(sender.expected) - unsure
            async with asyncio.timeout(120), api.changed:
                await api.changed.wait_for(lambda: {n for n, _ in echoes(api)} >= wanted)
            assert await child.stop(kill=False) == 0, child.log.read_text()[-3000:]
    check(sender.expected, echoes(api), unsure)


def echoes(api: FakeSlackAPI) -> list[tuple[int, str]]:
    found = []
    for post in api.posts:
        match = re.fullmatch(ECHO, str(post.get("text", "")))
        if match:
            found.append((int(match.group(1)), str(post.get("channel"))))
    return found
