"""The `iris` command line, as a person runs it: real subprocesses, a loopback fake model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fakes import message_body


class FakeMessagesAPI(BaseHTTPRequestHandler):
    """Answers every Messages API call with an echo of the last user text."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        last = body["messages"][-1]["content"][-1]["text"]
        payload = json.dumps(message_body([{"type": "text", "text": f"echo: {last}"}])).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def model_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMessagesAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


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


def test_db_migrate_backup_and_doctor(tmp_path: Path) -> None:
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
