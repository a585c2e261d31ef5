"""`iris chat` on a real terminal (a pseudo-terminal): line editing and history through the
standard library's readline, `/quit`, Ctrl-D, and Ctrl-C leaving the terminal as it was."""

from __future__ import annotations

import os
import pty
import select
import signal
import stat
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.app.test_cli import model_url  # noqa: F401  (a fixture)

UP = "\x1b[A"


class Terminal:
    def __init__(self, tmp_path: Path, url: str) -> None:
        self.master, self.slave = pty.openpty()
        self.before = termios.tcgetattr(self.slave)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
        env.update(
            ANTHROPIC_API_KEY="test", IRIS_LLM__BASE_URL=url, XDG_STATE_HOME=str(tmp_path),
            TERM="xterm", INPUTRC="/dev/null",
        )  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.app", "chat"],
            stdin=self.slave, stdout=self.slave, stderr=subprocess.PIPE, cwd=tmp_path, env=env,
        )  # fmt: skip
        self.seen = ""

    def read_until(self, text: str, timeout: float = 30) -> str:
        """Output up to `text`, waiting on the terminal (never longer than `timeout`)."""
        while text not in self.seen:
            ready, _, _ = select.select([self.master], [], [], timeout)
            assert ready, f"waited {timeout} s for {text!r}; saw {self.seen!r}"
            self.seen += os.read(self.master, 4096).decode(errors="replace")
        head, _, self.seen = self.seen.partition(text)
        return head

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def terminal(tmp_path: Path, model_url: str) -> Iterator[Terminal]:  # noqa: F811
    term = Terminal(tmp_path, model_url)
    yield term
    term.close()


def test_lines_are_edited_recalled_from_history_and_quit_ends(
    terminal: Terminal, tmp_path: Path
) -> None:
    terminal.read_until("/quit or Ctrl-D leaves.")
    terminal.read_until("you> ")
    terminal.type("helo\x1b[Dl\r")  # a typo fixed with the left arrow
    terminal.read_until("iris> echo: hello")
    terminal.read_until("you> ")
    terminal.type(UP + "\r")  # the last line again, from history
    terminal.read_until("iris> echo: hello")
    terminal.read_until("you> ")
    terminal.type("/quit\r")
    assert terminal.proc.wait(timeout=30) == 0
    history = tmp_path / "iris" / "chat_history"
    assert "hello" in history.read_text()
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert termios.tcgetattr(terminal.slave) == terminal.before


def test_ctrl_d_ends_the_chat(terminal: Terminal) -> None:
    terminal.read_until("you> ")
    terminal.type("\x04")
    assert terminal.proc.wait(timeout=30) == 0


def test_ctrl_c_while_reading_stops_iris_and_restores_the_terminal(terminal: Terminal) -> None:
    terminal.read_until("you> ")
    terminal.type("half a li")  # readline has the terminal in its own mode now
    terminal.read_until("half a li")
    terminal.proc.send_signal(signal.SIGINT)
    assert terminal.proc.wait(timeout=30) == 0
    assert termios.tcgetattr(terminal.slave) == terminal.before
