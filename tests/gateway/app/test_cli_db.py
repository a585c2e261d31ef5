"""`iris db backup` then `iris db restore`: the round trip, the refusal while Iris runs, and a
clear line for each kind of bad backup. Real subprocesses in a fresh directory."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.app.test_cli import iris


def texts(db: Path) -> list[str]:
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        return [str(r[0]) for r in conn.execute("SELECT text FROM messages WHERE role = 'user'")]
    finally:
        conn.close()


def test_a_backup_to_a_path_it_cannot_write_is_one_line(tmp_path: Path) -> None:
    assert iris(tmp_path, "chat", stdin="hello\n").returncode == 0
    (tmp_path / "plain.db").write_text("")
    for target, why in (("plain.db/x.db", "plain.db is not a directory"),
                        ("/proc/x.db", "unable to open database file")):  # fmt: skip
        result = iris(tmp_path, "db", "backup", target)
        assert result.returncode == 1
        assert result.stderr == f"error: cannot write the backup to {target}: {why}\n"


def test_backup_then_restore_round_trip_keeps_the_replaced_vault(tmp_path: Path) -> None:
    assert iris(tmp_path, "chat", stdin="/tz Asia/Tokyo\nbefore the backup\n").returncode == 0
    assert iris(tmp_path, "db", "backup", "b/copy.db").returncode == 0
    assert iris(tmp_path, "chat", stdin="after the backup\n").returncode == 0
    vault = tmp_path / "iris.db"
    assert "after the backup" in texts(vault)

    result = iris(tmp_path, "db", "restore", "b/copy.db")
    assert result.returncode == 0, result.stderr
    # Reading the backup and the staging copy left no -wal/-shm behind (one named
    # `.restoring-wal` would sit beside the vault; the backup's beside the backup).
    leftovers = sorted(p.name for p in tmp_path.rglob("*") if p.name.endswith(("-wal", "-shm")))
    assert leftovers == [], leftovers
    [kept] = list(tmp_path.glob("iris.db.replaced-*"))
    assert f"the vault it replaced is kept as {kept.name}" in result.stdout
    assert texts(vault) == ["/tz Asia/Tokyo", "before the backup"]
    assert "after the backup" in texts(kept)

    status = iris(tmp_path, "chat", stdin="/status\n")  # Iris runs on the restored vault
    assert status.returncode == 0 and "Asia/Tokyo" in status.stdout


def unfinished_work(db: Path) -> None:
    """What a vault has left to do when its backup is taken: a reply waiting (a Telegram 429
    put it off) for the history of the conversation `iris chat` left, one being sent, one
    sent, a message confirmed but not answered, a follow-up due an hour ago and one due next
    year."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            session, chat = conn.execute("SELECT id, chat FROM sessions").fetchone()
            for n, status in enumerate(("pending", "sending", "sent")):
                conn.execute(
                    "INSERT INTO outbox (idempotency_key, channel, chat_id, kind, text, status, "
                    "next_attempt_ms, created_ms, history_session, history_chat, history_kind, "
                    "history_tokens) VALUES (?, 'telegram', '1', 'reply', ?, ?, 0, 0, ?, ?, "
                    "'chat', 3)",
                    (f"k{n}", f"reply {status}", status, session if n == 0 else None, chat),
                )
            conn.execute(
                "INSERT INTO intake (channel, key, chat_key, payload, received_ms) "
                "VALUES ('telegram', 'u1', 'telegram:1', '{}', 0)"
            )
            for what, at in (("due", 1_000), ("later", 4_102_444_800_000)):
                conn.execute(
                    "INSERT INTO proactive_intents (chat, user, what, execute_at, due_at, "
                    "created_at) VALUES (1, 1, ?, ?, ?, 0)",
                    (what, at, at),
                )
    finally:
        conn.close()


def states(db: Path) -> tuple[list[str], list[str], list[str]]:
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        return (
            [r[0] for r in conn.execute("SELECT status FROM outbox ORDER BY id")],
            [r[0] for r in conn.execute("SELECT state FROM intake ORDER BY id")],
            [r[0] for r in conn.execute("SELECT status FROM proactive_intents ORDER BY id")],
        )
    finally:
        conn.close()


def test_a_restore_never_does_again_what_may_have_been_done_since_the_backup(
    tmp_path: Path,
) -> None:
    """The backup's waiting replies, unanswered messages and due follow-ups may all have gone
    out after it was taken: restored as they were, users got them twice. By default they are
    settled and counted; `--keep-pending` keeps them for an operator who knows better."""
    assert iris(tmp_path, "chat", stdin="hello\n").returncode == 0
    unfinished_work(tmp_path / "iris.db")
    assert iris(tmp_path, "db", "backup", "copy.db").returncode == 0
    result = iris(tmp_path, "db", "restore", "copy.db")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2] == (
        "not done again (each may have been done after the backup was taken): 1 waiting "
        "reply, 1 unanswered message(s), 1 due follow-up(s) (restore with --keep-pending "
        "to have them done)"
    )
    vault = tmp_path / "iris.db"
    # A send that was under way is the start's to settle, as after any crash.
    assert states(vault) == (["sent", "uncertain", "sending", "sent"], ["rejected"],
                             ["skipped", "pending"])  # fmt: skip
    conn = sqlite3.connect(f"{vault.as_uri()}?mode=ro", uri=True)
    try:  # the settled reply joined its conversation, as an uncertain send does
        said = [r[0] for r in conn.execute("SELECT text FROM messages WHERE role = 'assistant'")]
    finally:
        conn.close()
    assert said[-1] == "reply pending"
    assert states(tmp_path / "copy.db")[0] == ["sent", "pending", "sending", "sent"]  # as it was
    kept = iris(tmp_path, "db", "restore", "copy.db", "--keep-pending")
    assert kept.returncode == 0 and "not done again" not in kept.stdout
    assert states(vault) == (["sent", "pending", "sending", "sent"], ["pending"],
                             ["pending", "pending"])  # fmt: skip


def test_restore_refuses_while_iris_runs(tmp_path: Path) -> None:
    assert iris(tmp_path, "db", "migrate").returncode == 0
    assert iris(tmp_path, "db", "backup", "copy.db").returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    with subprocess.Popen(
        [sys.executable, "-m", "gateway.app", "run"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    ) as running:
        assert running.stderr is not None
        for line in running.stderr:
            if "iris is running" in line:
                break
        refused = iris(tmp_path, "db", "restore", "copy.db")
        running.send_signal(signal.SIGTERM)
        assert running.wait(timeout=30) == 0
    assert refused.returncode == 1
    assert refused.stderr == (
        "error: Iris is running on iris.db (iris run or iris chat): stop it first\n"
    )
    assert list(tmp_path.glob("iris.db.replaced-*")) == []
    assert iris(tmp_path, "db", "restore", "copy.db").returncode == 0  # once it stopped


def newer_schema(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 9999")
    conn.close()


def not_iris(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (x)")
    conn.close()


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (None, "no such file: bad.db"),
        (
            lambda p: p.write_bytes(b"just some text, not a database" * 200),
            "bad.db is not a readable SQLite database",
        ),
        (not_iris, "bad.db is not an Iris vault (no users, chats, sessions, messages table)"),
        (newer_schema, "bad.db has schema version 9999, newer than this Iris"),
    ],
)
def test_a_bad_backup_is_refused_in_one_line_and_nothing_changes(
    tmp_path: Path, make: object, error: str
) -> None:
    assert iris(tmp_path, "chat", stdin="keep me\n").returncode == 0
    bad = tmp_path / "bad.db"
    if make is not None:
        if make is newer_schema:
            assert iris(tmp_path, "db", "backup", "bad.db").returncode == 0
        make(bad)  # type: ignore[operator]
    result = iris(tmp_path, "db", "restore", "bad.db")
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {error}") and result.stderr.count("\n") == 1
    assert texts(tmp_path / "iris.db") == ["keep me"]
    assert sorted(p.name for p in tmp_path.glob("iris.db.*")) == [
        "iris.db.chat.lock",
        "iris.db.lock",
    ]
