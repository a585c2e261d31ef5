"""The `iris` command line, as a person runs it: real subprocesses, a loopback fake model."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fakes.echo_model import echo_model


@pytest.fixture
def model_url() -> Iterator[str]:
    with echo_model() as url:
        yield url


def iris(
    tmp_path: Path,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gateway.app", *args],
        input=stdin,
        text=True,
        capture_output=True,
        timeout=timeout,
        cwd=tmp_path,
        env=full_env,
    )


def second_chat_refused(tmp_path: Path, env: dict[str, str], error: str) -> None:
    """With one `iris chat` running (it answered a line), a second is refused with `error`;
    once the first ends, a chat starts again."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    first = subprocess.Popen(
        [sys.executable, "-m", "gateway.app", "chat"], cwd=tmp_path, env={**full_env, **env},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert first.stdin is not None and first.stdout is not None
    try:
        first.stdin.write("hello\n")
        first.stdin.flush()
        assert first.stdout.readline() == "echo: hello\n"  # it runs, holding the vault
        second = iris(tmp_path, "chat", stdin="me too\n", env=env)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1] == f"error: {error}"
    finally:
        first.stdin.close()
        assert first.wait(30) == 0
        first.stdout.close()
        if first.stderr is not None:
            first.stderr.close()
    assert iris(tmp_path, "chat", stdin="again\n", env=env).returncode == 0  # free again


def test_a_second_terminal_chat_on_one_vault_is_refused(tmp_path: Path, model_url: str) -> None:
    """Two would share the one local conversation, and each would take the other's
    unanswered message for one a crash left behind (and answer it too)."""
    env = {"ANTHROPIC_API_KEY": "test", "IRIS_LLM__BASE_URL": model_url}
    second_chat_refused(
        tmp_path, env, "another iris chat is using iris.db: one terminal chat per vault at a time"
    )


def test_a_second_iris_run_on_one_sqlite_vault_is_refused(tmp_path: Path) -> None:
    """It would poll the same bot, run the same follow-ups and resend the same waiting
    replies (the README: SQLite stays one process)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    first = subprocess.Popen(
        [sys.executable, "-m", "gateway.app", "run"], cwd=tmp_path, env=full_env,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert first.stderr is not None
    try:
        for line in first.stderr:  # serving (no channel: until SIGTERM)
            if "iris is running" in line:
                break
        second = iris(tmp_path, "run")
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1] == (
            "error: another iris run is using iris.db: one iris run per SQLite vault"
        )
    finally:
        first.terminate()
        assert first.wait(30) == 0
        first.stderr.close()


def test_chat_serves_no_http_so_run_finds_the_port_free(tmp_path: Path, model_url: str) -> None:
    """`iris chat` beside `iris run` with `[http] enabled`, in either order: the API and
    `/healthz` are `iris run`'s. A chat that took the port would keep `iris run` from
    starting, and answer its health checks "ok" meanwhile."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"ANTHROPIC_API_KEY": "test", "IRIS_LLM__BASE_URL": model_url,
           "IRIS_HTTP__ENABLED": "true", "IRIS_HTTP__PORT": str(port)}  # fmt: skip
    with socket.socket() as taken:  # whoever holds the port: the chat does not care
        taken.bind(("127.0.0.1", port))
        taken.listen()
        chat = iris(tmp_path, "chat", stdin="hello\n", env=env)
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip().splitlines()[0] == "echo: hello"
        assert "http" not in chat.stderr.lower()
        run = iris(tmp_path, "run", env=env)
        assert run.returncode != 0
        assert "the address is in use (another iris run?)" in run.stderr


def test_chat_with_piped_stdin_answers_each_line_in_order(tmp_path: Path, model_url: str) -> None:
    env = {"ANTHROPIC_API_KEY": "test", "IRIS_LLM__BASE_URL": model_url}
    result = iris(tmp_path, "chat", stdin="first\n\n/tz Asia/Tokyo\nsecond\n", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "echo: first"
    assert lines[1].startswith("Time zone set to Asia/Tokyo")
    assert lines[2] == "echo: second"
    assert (tmp_path / "iris.db").exists()


def test_chat_without_a_key_explains_and_still_runs_commands(tmp_path: Path) -> None:
    result = iris(tmp_path, "chat", stdin="hello\n/status\n")
    assert result.returncode == 0
    out = result.stdout
    assert "set ANTHROPIC_API_KEY" in out and "Model: none" in out


def test_run_serves_until_sigterm_then_exits_0(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    with subprocess.Popen(
        [sys.executable, "-m", "gateway.app", "run"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "iris is running" in line:
                break
        text = "".join(seen)
        assert "channel telegram is off: not enabled" in text
        assert "no channel is running" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_the_vault_and_its_backups_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    """Whatever umask `iris` was started with (022 here, the usual default), the files that
    hold conversations are not readable by other local users; a vault that is, doctor flags."""
    old = os.umask(0o022)
    try:
        assert iris(tmp_path, "db", "migrate").returncode == 0
        assert iris(tmp_path, "db", "backup", str(tmp_path / "b" / "copy.db")).returncode == 0
    finally:
        os.umask(old)
    made = [tmp_path / "iris.db", tmp_path / "b" / "copy.db", tmp_path / "b"]
    assert [oct(p.stat().st_mode & 0o077) for p in made] == ["0o0"] * 3
    assert "WARNING" not in iris(tmp_path, "doctor").stdout
    (tmp_path / "iris.db").chmod(0o644)  # as Iris made it before
    out = iris(tmp_path, "doctor").stdout
    assert "vault: WARNING other users have access to it (mode 644); run: chmod 600 iris.db*" \
        in out  # fmt: skip


def test_db_migrate_backup_and_doctor(tmp_path: Path) -> None:
    before = iris(tmp_path, "doctor")  # on a new directory: checks, creates nothing
    assert before.returncode == 0
    assert "http: off ([http] enabled = true serves" in before.stdout
    on = iris(tmp_path, "doctor", env={"IRIS_HTTP__ENABLED": "true", "IRIS_HTTP__PORT": "9999"})
    assert "http: on, http://127.0.0.1:9999 — admin API off (set IRIS_API_TOKEN" in on.stdout
    assert "iris.db (not created yet: the first start makes it)" in before.stdout
    assert not (tmp_path / "iris.db").exists()
    (tmp_path / "plain").write_text("")  # a vault path under a file cannot be made
    blocked = iris(tmp_path, "doctor", env={"IRIS_VAULT__PATH": "plain/v/iris.db"})
    assert blocked.returncode == 1
    assert f"vault: ERROR plain/v/iris.db cannot be created: {tmp_path / 'plain'} is not a " \
        "directory" in blocked.stdout  # fmt: skip
    first = iris(tmp_path, "db", "migrate")
    assert first.returncode == 0 and "applied: core" in first.stdout
    assert "applied: nothing" in iris(tmp_path, "db", "migrate").stdout
    backup = iris(tmp_path, "db", "backup", str(tmp_path / "b" / "copy.db"))
    assert backup.returncode == 0 and (tmp_path / "b" / "copy.db").exists()
    again = iris(tmp_path, "db", "backup", str(tmp_path / "b" / "copy.db"))
    assert again.returncode == 1 and "already exists" in again.stderr
    doctor = iris(tmp_path, "doctor")
    assert doctor.returncode == 0
    assert "up to date" in doctor.stdout and "ANTHROPIC_API_KEY" in doctor.stdout


def test_doctor_online_checks_the_model(tmp_path: Path, model_url: str) -> None:
    ok = iris(
        tmp_path,
        "doctor",
        "--online",
        env={"ANTHROPIC_API_KEY": "k", "IRIS_LLM__BASE_URL": model_url},
    )
    assert ok.returncode == 0 and "model online: ok" in ok.stdout
    down = iris(
        tmp_path,
        "doctor",
        "--online",
        env={"ANTHROPIC_API_KEY": "k", "IRIS_LLM__BASE_URL": "http://127.0.0.1:9"},
    )
    assert down.returncode == 1 and "model online: FAILED" in down.stdout


async def doctor_online_model_line(tmp_path: Path, status: int) -> tuple[int | None, list[str]]:
    """`iris doctor --online` against a model API answering `status`: (exit, model lines)."""
    import asyncio

    from tests.fakes.anthropic_server import AnthropicFaultServer

    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    async with AnthropicFaultServer() as api:
        api.status(status)
        env.update({"ANTHROPIC_API_KEY": "revoked", "IRIS_LLM__BASE_URL": api.base_url})
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.app", "doctor", "--online",
            cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(60):
            out, _ = await proc.communicate()
    lines = [line for line in out.decode().splitlines() if line.startswith("model online")]
    return proc.returncode, lines


async def test_doctor_online_says_when_the_model_refuses_the_key(tmp_path: Path) -> None:
    code, lines = await doctor_online_model_line(tmp_path, 401)
    assert code == 1
    assert lines == ["model online: FAILED — API key rejected (HTTP 401): check ANTHROPIC_API_KEY"]


async def test_doctor_online_names_the_setting_when_the_api_does_not_know_the_model(
    tmp_path: Path,
) -> None:
    code, [line] = await doctor_online_model_line(tmp_path, 404)
    assert code == 1
    assert line.startswith("model online: FAILED — model 'claude-")
    assert line.endswith("the API does not know this model (HTTP 404): check [llm] model and "
                         "[llm] base_url")  # fmt: skip


def test_doctor_lists_only_the_secrets_this_configuration_needs(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[telegram]\nenabled = true\n")
    env = {"TELEGRAM_BOT_TOKEN": "123:abc"}
    out = iris(tmp_path, "doctor", env=env).stdout
    assert "secret TELEGRAM_BOT_TOKEN: set (for [telegram] enabled)" in out
    assert "secret ANTHROPIC_API_KEY: missing (for the model)" in out
    assert "SLACK" not in out and "WEBHOOK" not in out and "IRIS_API_TOKEN" not in out
    (tmp_path / "config.toml").write_text(
        '[slack]\nenabled = true\nmode = "http"\n[http]\nenabled = true\n'
    )
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}
    out = iris(tmp_path, "doctor", env=env).stdout
    assert "secret SLACK_SIGNING_SECRET: set" in out and "SLACK_APP_TOKEN" not in out
    assert "TELEGRAM" not in out
    assert "secret IRIS_API_TOKEN: missing (for the admin HTTP API (optional))" in out


def test_doctor_says_what_the_limits_allow_and_warns_of_caps_that_contradict(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.toml").write_text(
        "[limits]\nuser_usd_per_day = 60\nuser_usd_per_month = 50\nglobal_usd_per_day = 0\n"
        "user_messages_per_minute = 5\n"
    )
    result = iris(tmp_path, "doctor")
    lines = [line for line in result.stdout.splitlines() if line.startswith("limits:")]
    assert lines == [
        "limits: per user $60.00 a day, $50.00 a month; everyone no daily cap; no token cap; "
        "5 messages a minute per user; admins not exempt",
        "limits: WARNING user_usd_per_day ($60.00) is above user_usd_per_month ($50.00): the "
        "month's cap stops a user first",
    ]
    assert result.returncode == 0  # a warning: the configuration still runs


class _Stalling(BaseHTTPRequestHandler):
    """A model that takes each request and never answers it (until `released`)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        assert isinstance(self.server, _StallingModel)
        self.server.asked.set()
        self.server.released.wait()

    def log_message(self, *args: object) -> None:
        return None


class _StallingModel(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Stalling)
        self.asked, self.released = threading.Event(), threading.Event()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_chat_stops_on_ctrl_c_and_quits_at_once_on_a_second(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """The log says "Ctrl-C or SIGTERM again to quit now": a second `kill` did nothing."""
    server = _StallingModel()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    env |= {
        "ANTHROPIC_API_KEY": "test",
        "IRIS_LLM__BASE_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "IRIS_ROUTER__DRAIN_TIMEOUT_S": "600",  # without the second Ctrl-C: a long wait
    }
    try:
        with subprocess.Popen(
            [sys.executable, "-m", "gateway.app", "chat"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        ) as proc:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write("are you there?\n")
            proc.stdin.flush()
            assert server.asked.wait(60)
            lines: queue.Queue[str] = queue.Queue()
            reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr or ()])
            reader.start()
            proc.send_signal(sig)
            while "stopping: waiting up to 600 s for 1 turn(s) in flight" not in lines.get(
                timeout=60
            ):
                pass
            proc.send_signal(sig)
            assert proc.wait(timeout=60) == 130
            reader.join()
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()
    # The message was saved: the next start answers it (the model answers this time).
    with echo_model() as url:
        env["IRIS_LLM__BASE_URL"] = url
        result = subprocess.run(
            [sys.executable, "-m", "gateway.app", "chat"],
            cwd=tmp_path,
            env=env,
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    assert "echo: are you there?" in result.stdout


def test_bare_iris_prints_the_commands_and_help_screens_say_what_they_do(tmp_path: Path) -> None:
    bare = iris(tmp_path)
    assert bare.returncode == 2
    assert "usage: iris" in bare.stdout and "chat" in bare.stdout and "doctor" in bare.stdout
    service = iris(tmp_path, "service", "--help")
    assert "systemd unit" in service.stdout
    manifest = iris(tmp_path, "slack", "manifest", "--help")
    assert "(default: )" not in manifest.stdout
    init = iris(tmp_path, "init", "--help").stdout
    assert init.count("what the files say now") == 1  # explained once, not on every flag
    assert "model id (default: its current value)" in init


def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    with subprocess.Popen(
        [sys.executable, "-m", "gateway.app", "slack", "manifest"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # as `| head` does once it has read enough
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_a_library_error_is_logged_in_one_line_and_ours_keep_their_traceback() -> None:
    """python-telegram-bot logs each failed poll with a traceback (a proxy's HTML 502 page is
    not JSON): with the CLI's filter on the handler, one line naming the exception."""
    import io
    import logging

    from gateway.app.logs import library_one_line

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(library_one_line)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    for name in ("telegram.ext.Updater", "gateway.turns.router"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.propagate = False
        try:
            try:
                raise ValueError("Invalid server response\n<html>502</html>")
            except ValueError:
                logger.exception("Exception happened while polling for %s", "updates")
        finally:
            logger.removeHandler(handler)
            logger.propagate = True
    library, ours, *trace = stream.getvalue().splitlines()
    assert library == (
        "ERROR telegram.ext.Updater: Exception happened while polling for updates "
        "(ValueError: Invalid server response <html>502</html>)"
    )
    assert ours == "ERROR gateway.turns.router: Exception happened while polling for updates"
    assert trace[0] == "Traceback (most recent call last):"
