"""`iris` on a PostgreSQL vault (`IRIS_VAULT__URL`): chat, migrate, backup, copy from SQLite,
and one clear line for each bad input. Real subprocesses against the session's PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.fakes.echo_model import echo_model
from tests.fakes.postgres import PgServer
from tests.gateway.app.test_cli import iris, second_chat_refused
from vault.migrations import MIGRATIONS


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return list(conn.execute(sql.encode()).fetchall())


def test_chat_and_migrate_run_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    env = {"IRIS_VAULT__URL": pg_url}
    migrated = iris(tmp_path, "db", "migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert f"schema version {len(MIGRATIONS)}" in migrated.stdout
    chat = iris(tmp_path, "chat", stdin="/tz Asia/Tokyo\nhello there\n/status\n", env=env)
    assert chat.returncode == 0, chat.stderr
    assert "Asia/Tokyo" in chat.stdout
    texts = rows(pg_url, "SELECT text FROM messages WHERE role = 'user' ORDER BY id")
    assert [t for (t,) in texts] == ["/tz Asia/Tokyo", "hello there", "/status"]
    assert not (tmp_path / "iris.db").exists()
    again = iris(tmp_path, "db", "migrate", env=env)
    assert again.returncode == 0 and "applied: nothing" in again.stdout


def test_a_wrong_url_or_credentials_is_one_line_naming_the_key(
    tmp_path: Path, pg_server: PgServer, pg_url: str
) -> None:
    missing = pg_server.url("no_such_database")
    wrong_user = pg_url.replace("postgres:@", "nobody:secret@", 1)
    for url in (missing, wrong_user, "postgresql://127.0.0.1:1/iris"):
        result = iris(tmp_path, "db", "migrate", env={"IRIS_VAULT__URL": url})
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("config error: vault.url: cannot connect to postgresql://")
        assert "secret" not in line
    chat = iris(tmp_path, "chat", stdin="hi\n", env={"IRIS_VAULT__URL": missing})
    assert chat.returncode == 2
    assert chat.stderr.strip().splitlines()[-1].startswith("config error: vault.url: cannot")
    scheme = iris(tmp_path, "chat", stdin="hi\n", env={"IRIS_VAULT__URL": "mysql://h/db"})
    assert scheme.returncode == 2
    assert "vault.url" in scheme.stderr and "postgresql://" in scheme.stderr


def test_an_older_iris_refuses_a_newer_postgresql_schema(tmp_path: Path, pg_url: str) -> None:
    env = {"IRIS_VAULT__URL": pg_url, "ANTHROPIC_API_KEY": "test"}
    assert iris(tmp_path, "db", "migrate", env=env).returncode == 0
    with psycopg.connect(pg_url) as conn:
        conn.execute(b"UPDATE iris_schema SET version = version + 1")
    newer = len(MIGRATIONS) + 1
    for command, stdin in (("chat", "hello\n"), ("run", "")):
        result = iris(tmp_path, command, stdin=stdin, env=env)
        assert result.returncode == 2, result.stderr
        # One line naming both versions (after `run`'s warnings about disabled channels).
        errors = [ln for ln in result.stderr.splitlines() if not ln[:4].isdigit()]
        assert errors == [
            f"error: vault schema version {newer} is newer than this Iris ({len(MIGRATIONS)}); "
            "upgrade Iris or restore a backup"
        ]
    assert rows(pg_url, "SELECT count(*) FROM messages") == [(0,)]


def test_backup_uses_pg_dump_and_says_so_when_it_is_missing(
    tmp_path: Path, pg_server: PgServer, pg_url: str
) -> None:
    assert pg_server.bin_dir is not None
    path = f"{pg_server.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {"IRIS_VAULT__URL": pg_url, "PATH": path}
    assert iris(tmp_path, "db", "migrate", env=env).returncode == 0
    made = iris(tmp_path, "db", "backup", "b/vault.dump", env=env)
    assert made.returncode == 0, made.stderr
    assert "pg_restore" in made.stdout
    assert (tmp_path / "b" / "vault.dump").read_bytes()[:5] == b"PGDMP"
    lacking = iris(tmp_path, "db", "backup", "b/other.dump", env={**env, "PATH": str(tmp_path)})
    assert lacking.returncode == 1
    assert "needs pg_dump" in lacking.stderr and "not on PATH" in lacking.stderr
    assert not (tmp_path / "b" / "other.dump").exists()


def test_a_second_terminal_chat_on_one_postgresql_vault_is_refused(
    tmp_path: Path, pg_url: str
) -> None:
    """No file to lock there: an advisory lock. Without it the two shared `console:local` and
    a line typed in one terminal was answered in the other."""
    with echo_model() as model_url:
        env = {"IRIS_VAULT__URL": pg_url, "ANTHROPIC_API_KEY": "test",
               "IRIS_LLM__BASE_URL": model_url}  # fmt: skip
        second_chat_refused(
            tmp_path, env,
            "another iris chat is using this PostgreSQL vault: one terminal chat at a time",
        )  # fmt: skip


def test_two_backups_to_one_target_at_once_make_one_whole_file(
    tmp_path: Path, pg_server: PgServer, pg_url: str
) -> None:
    """Each dump has its own side file, and a finished one is never replaced: one backup
    succeeds, the other says the target exists, whatever the timing."""
    assert pg_server.bin_dir is not None
    path = f"{pg_server.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {"IRIS_VAULT__URL": pg_url, "PATH": path}
    assert iris(tmp_path, "db", "migrate", env=env).returncode == 0
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    both = [
        subprocess.Popen(
            [sys.executable, "-m", "gateway.app", "db", "backup", "same.dump"],
            cwd=tmp_path,
            env={**full_env, **env},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    results = sorted((p.wait(60), p.communicate()[1]) for p in both)
    assert [code for code, _ in results] == [0, 1]
    assert "backup target already exists" in results[1][1]
    assert (tmp_path / "same.dump").read_bytes()[:5] == b"PGDMP"
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_a_failed_backup_leaves_no_file_and_keeps_the_password_off_the_command_line(
    tmp_path: Path, pg_url: str
) -> None:
    # A pg_dump that writes half a file and fails (as one of another major version does),
    # noting what it was given.
    fake = tmp_path / "bin" / "pg_dump"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'echo "$@" > "$0.args"; echo "$PGPASSWORD" > "$0.env"\n'
        'for a in "$@"; do case $a in --file=*) printf half > "${a#--file=}";; esac; done\n'
        "echo 'pg_dump: error: aborting because of server version mismatch' >&2; exit 1\n"
    )
    fake.chmod(0o755)
    url = pg_url.replace("postgres:@", "postgres:S3cretPw@", 1)  # trusted locally: ignored
    env = {"IRIS_VAULT__URL": url, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    assert iris(tmp_path, "db", "migrate", env=env).returncode == 0
    for _ in range(2):  # and again: no leftover file refuses the retry
        failed = iris(tmp_path, "db", "backup", "vault.dump", env=env)
        assert failed.returncode == 1
        assert "pg_dump failed: pg_dump: error: aborting because of server version" in (
            failed.stderr
        )
        assert sorted(p.name for p in tmp_path.iterdir() if "dump" in p.name) == []
    assert "S3cretPw" not in (fake.parent / "pg_dump.args").read_text()
    assert (fake.parent / "pg_dump.env").read_text().strip() == "S3cretPw"


def test_copy_moves_a_sqlite_vault_idempotently_with_counts(tmp_path: Path, pg_url: str) -> None:
    assert iris(tmp_path, "chat", stdin="/tz Asia/Tokyo\nfirst\nsecond\n").returncode == 0
    first = iris(tmp_path, "db", "copy", "iris.db", pg_url)
    assert first.returncode == 0, first.stderr
    counts = {line.split()[0]: line.split()[2:5:2] for line in first.stdout.splitlines()[:-1]}
    assert counts["users"] == ["1", "1"] and counts["chats"] == ["1", "1"]
    assert counts["messages"][0] == counts["messages"][1] != "0"
    assert "all counts match" in first.stdout
    second = iris(tmp_path, "db", "copy", "iris.db", pg_url)
    assert second.returncode == 0 and second.stdout == first.stdout
    # New rows after the copy draw ids past the copied ones.
    env = {"IRIS_VAULT__URL": pg_url}
    after = iris(tmp_path, "chat", stdin="third\n/status\n", env=env)
    assert after.returncode == 0, after.stderr
    assert "Asia/Tokyo" in after.stdout
    texts = rows(pg_url, "SELECT text FROM messages WHERE role = 'user' ORDER BY id")
    assert [t for (t,) in texts] == ["/tz Asia/Tokyo", "first", "second", "third", "/status"]


def test_copy_refuses_bad_arguments_with_one_line(tmp_path: Path, pg_url: str) -> None:
    not_pg = iris(tmp_path, "db", "copy", "iris.db", "sqlite:///x.db")
    assert not_pg.returncode == 2 and "postgresql://" in not_pg.stderr
    no_file = iris(tmp_path, "db", "copy", "missing.db", pg_url)
    assert no_file.returncode == 2 and "missing.db" in no_file.stderr
    assert iris(tmp_path, "db", "migrate").returncode == 0
    bad = iris(tmp_path, "db", "copy", "iris.db", pg_url.replace("postgres:@", "x:y@", 1))
    assert bad.returncode == 2
    [line] = bad.stderr.strip().splitlines()
    assert line.startswith("config error: URL: cannot connect")


def test_copy_refuses_a_database_that_holds_other_users(tmp_path: Path, pg_url: str) -> None:
    """Iris already ran on it: its user #1 is someone else, and a copy would file the SQLite
    vault's messages under that user's chats."""
    assert iris(tmp_path, "chat", stdin="carol's secret\n").returncode == 0
    assert iris(tmp_path, "db", "migrate", env={"IRIS_VAULT__URL": pg_url}).returncode == 0
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            b"INSERT INTO users (id, channel, user_id, first_seen_ms, last_seen_ms) "
            b"VALUES (1, 'telegram', '4002', 0, 0)"
        )
    refused = iris(tmp_path, "db", "copy", "iris.db", pg_url)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert "already holds other data (users #1, telegram:4002" in line
    assert "copy into an empty database" in line
    assert rows(pg_url, "SELECT count(*) FROM messages") == [(0,)]  # nothing was written
