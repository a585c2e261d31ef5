"""Slack Socket Mode with two `iris run` replicas on one real PostgreSQL: one leader holds the
socket; when it is killed with SIGKILL the standby takes the socket over (well within the
30 s the leadership promises), what the dead leader left unacked is delivered again on the new
socket and answered, and what Slack held while no socket was open is answered too — each
message once."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.child import Child
from tests.fakes.echo_model import echo_model
from tests.fakes.slack import BOT_TOKEN, FakeSlackAPI, dm_event, event_body, running_fake_slack

# A replayed message answered a minute or more after it was sent starts with a note.
LATE = r"(?:\(Answering your message from [^\n]*\)\n\n)?"
ECHO = re.compile(LATE + r"echo: (?:m\d+\n\n)*m(\d+)")


def replica(tmp_path: Path, name: str, pg_url: str, api: FakeSlackAPI, model_url: str) -> Child:
    home = tmp_path / name
    home.mkdir()
    config = home / "config.toml"
    config.write_text(
        f'[vault]\npath = "{home / "iris.db"}"\nurl = "{pg_url}"\nreplica_id = "{name}"\n'
        'leader_retry_s = 0.5\n[auth]\nallow = ["slack:*"]\n'
        f'[slack]\nenabled = true\nmode = "socket"\napi_url = "{api.url}/api/"\n'
        "[proactive]\nenabled = false\n"
    )
    return Child(
        config,
        {"ANTHROPIC_API_KEY": "k", "IRIS_LLM__BASE_URL": model_url,
         "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": "xapp-test"},
    )  # fmt: skip


def led(child: Child, name: str) -> bool:
    return f"replica {name} leads slack-socket-mode" in child.log.read_text(errors="replace")


def envelope(n: int) -> dict[str, Any]:
    # Slack's ts is the send time: an older one would be answered with a "too old" notice.
    event = dm_event(f"m{n}", user=f"U{n % 3}", ts=f"{int(time.time())}.{n:06d}")
    return {"envelope_id": f"env-{n}", "type": "events_api", "retry_attempt": 0,
            "accepts_response_payload": False,
            "payload": json.loads(event_body(event, event_id=f"Ev{n}"))}  # fmt: skip


async def push(api: FakeSlackAPI, n: int) -> None:
    await api.push_event(f"env-{n}", json.dumps(envelope(n)["payload"]))


async def sent(pg_url: str) -> int:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT count(*) FROM outbox WHERE status = 'sent'")
        row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


def answered(api: FakeSlackAPI) -> Counter[int]:
    return Counter(
        int(m.group(1)) for p in api.posts if (m := re.fullmatch(ECHO, str(p.get("text", ""))))
    )


@pytest.mark.slow
async def test_sigkill_of_the_socket_leader_hands_the_socket_over(
    tmp_path: Path, pg_url: str
) -> None:
    with echo_model() as model_url:
        async with running_fake_slack() as api:
            a = replica(tmp_path, "a", pg_url, api, model_url)
            b = replica(tmp_path, "b", pg_url, api, model_url)
            await a.start()
            await a.serving()
            await api.wait_for(lambda: len(api.open_sockets()) == 1)
            await b.start()
            await b.serving()  # standing by: it sends, but opens no socket
            for n in range(5):
                await push(api, n)
            async with asyncio.timeout(30), api.changed:
                await api.changed.wait_for(lambda: set(answered(api)) == set(range(5)))
            assert len(api.sockets) == 1
            # The replies' "sent" marks are written behind the posts. A kill before they are in
            # leaves a reply `uncertain` (never repeated) and holds the chat's later replies
            # until its lease runs out (`test_intake_sigkill.py`, `test_outbox_leases.py`).
            async with asyncio.timeout(30):
                while await sent(pg_url) < 5:  # noqa: ASYNC110  (a query)
                    await asyncio.sleep(0)

            # Slack has handed the leader one more envelope; the leader dies before reading it.
            [socket] = api.open_sockets()
            api.unacked["env-5"] = (socket, envelope(5))
            killed = time.monotonic()
            assert await a.stop(kill=True) == -9
            await api.wait_for(lambda: not api.open_sockets())
            for n in range(6, 10):  # no socket open: Slack holds these
                await push(api, n)
            async with asyncio.timeout(30), api.changed:
                await api.changed.wait_for(lambda: len(api.open_sockets()) == 1)
            took_over = time.monotonic() - killed
            async with asyncio.timeout(30), api.changed:
                await api.changed.wait_for(lambda: set(answered(api)) == set(range(10)))
                await api.changed.wait_for(lambda: not api.unacked)
            done = time.monotonic()
            assert len(api.sockets) == 2  # one per leader, never two at once
            assert api.redelivered == 1  # env-5, on the new socket
            assert [n for n, k in answered(api).items() if k > 1] == []  # none twice
            assert await b.stop(kill=False) == 0, b.log.read_text()[-3000:]
    assert led(a, "a") and led(b, "b")  # (the logs are complete once the runs are over)
    print(
        f"the standby held the socket {took_over:.1f} s after the leader was killed and had"
        f" answered everything {done - killed:.1f} s after"
    )
