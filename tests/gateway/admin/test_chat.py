"""The admin surface in chat: who may use it, what it shows, and that it is audited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.admin.chat import audited, described
from gateway.app.app import App
from gateway.app.cli import parse_since
from gateway.app.cli_common import UsageError
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound


async def admin_app(tmp_path: Path, llm: FakeLLM, channel: MemoryChannel) -> App:
    config = make_config(tmp_path, auth={"admins": ["memory:boss"], "allow": ["memory:*"]})
    return app_with(config, channel, llm)


async def test_non_admin_is_refused_and_the_attempt_audited(
    tmp_path: Path, llm: FakeLLM, channel: MemoryChannel
) -> None:
    async with await admin_app(tmp_path, llm, channel) as app:
        await app.router.submit(inbound("/admin stats", user="mallory"))
        assert "not allowed" in channel.texts()[-1]
        await app.router.submit(inbound("/admin", user="mallory"))
        entries = await app.audit.recent()
        assert sorted((e.actor, e.action, e.outcome) for e in entries) == [
            ("memory:mallory", "admin", "refused"),  # not "admin admin"
            ("memory:mallory", "admin stats", "refused"),
        ]
        await app.router.submit(inbound("/help", user="mallory"))
        assert "/admin" not in channel.texts()[-1]


async def test_admin_stats_users_trace_and_audit(
    tmp_path: Path, llm: FakeLLM, channel: MemoryChannel
) -> None:
    async with await admin_app(tmp_path, llm, channel) as app:
        await app.router.submit(inbound("hello", user="alice", chat="a"))
        await app.router.submit(inbound("/admin stats", user="boss", chat="b"))
        stats = channel.texts()[-1]
        assert "*Last 24h*" in stats
        assert "messages: memory in 2, out 1" in stats
        assert "model: calls 1" in stats
        await app.router.submit(inbound("/admin users", user="boss", chat="b"))
        assert "memory:alice" in channel.texts()[-1]
        await app.router.submit(inbound("/admin trace", user="boss", chat="b"))
        assert "No model request in this chat" in channel.texts()[-1]
        await app.router.submit(inbound("what's up", user="boss", chat="b"))
        await app.router.submit(inbound("and now?", user="boss", chat="b"))
        await app.router.submit(inbound("/admin trace", user="boss", chat="b"))
        trace = channel.texts()[-1]
        assert "Context trace" in trace
        assert trace.count("  - history") == 1 and "  - history × " in trace  # once, counted
        await app.router.submit(inbound("/admin nonsense", user="boss", chat="b"))
        assert "Unknown admin command 'nonsense'" in channel.texts()[-1]
        await app.router.submit(inbound("/admin audit", user="boss", chat="b"))
        audit = channel.texts()[-1]
        assert "memory:boss via memory: admin stats -> ok" in audit
        assert "admin trace -> ok" in audit


def test_parse_since() -> None:
    now = 10 * 86_400_000
    assert parse_since("24h", now) == now - 86_400_000
    assert parse_since("7d", now) == now - 7 * 86_400_000
    assert parse_since("1970-01-02", now) == 86_400_000
    assert parse_since("100000000000000000000h", now) == 0  # before 1970: all of it
    with pytest.raises(UsageError):
        parse_since("\u00b2h", now)  # a digit to str.isdigit, not to int()


def test_audit_arguments_are_shown_as_words_not_as_a_dict() -> None:
    assert described({"args": ""}) == ""
    assert described({"args": "users 7d"}) == "users 7d"
    shown = described({"name": "documents", "enabled": False, "priority": None})
    assert shown == "name=documents enabled=false"
    assert described({"what": "ask how it went", "ids": [1, 2]}) == (
        'what="ask how it went" ids=[1, 2]'
    )
    assert audited("admin users", {"args": "users 7d"}) == "admin users 7d"
    assert audited("admin stats", {"args": "stats"}) == "admin stats"
    assert audited("admin allow", {"args": "memory:u2"}) == "admin allow memory:u2"


def test_iris_audit_prints_and_rejects_bad_since(tmp_path: Path) -> None:
    def iris(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway.app", "audit", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    chat = subprocess.run(
        [sys.executable, "-m", "gateway.app", "chat"],
        input="/admin users\n",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert chat.returncode == 0
    listed = iris("--since", "1h")
    assert listed.returncode == 0
    assert "console:local via console: admin users -> ok" in listed.stdout
    bad = iris("--since", "yesterday-ish")
    assert bad.returncode == 2
    assert "--since: expected 24h" in bad.stderr
    assert iris("--since", "100000000000000000000h").returncode == 0
    none = iris("--limit", "0")
    assert none.returncode == 2
    assert "--limit: must be a positive whole number" in none.stderr


async def test_admin_users_shows_time_zone_and_consent(
    tmp_path: Path, llm: FakeLLM, channel: MemoryChannel
) -> None:
    async with await admin_app(tmp_path, llm, channel) as app:
        await app.router.submit(inbound("/tz Asia/Tokyo", user="alice", chat="a"))
        await app.router.submit(inbound("/proactive off", user="alice", chat="a"))
        await app.router.submit(inbound("/admin users", user="boss", chat="b"))
        listing = channel.texts()[-1]
    alice = next(line for line in listing.splitlines() if "memory:alice" in line)
    assert "tz Asia/Tokyo, proactive off" in alice
    boss = next(line for line in listing.splitlines() if "memory:boss" in line)
    assert "tz default, proactive on" in boss


def test_stats_text_says_yes_no_and_n_a_not_python_values() -> None:
    from gateway.admin.stats import render

    text = render({"24h": {"suggestions": {"doc": {"shown": 0, "acceptance": None,
                                                   "demoted": False}}}})  # fmt: skip
    assert text.splitlines()[-1] == "suggestions: doc shown 0, acceptance n/a, demoted no"
