"""The terminal channel: `iris chat`, a real channel through the same router as the others.

Interactive on a TTY (a prompt, replies prefixed); with piped or redirected stdin it handles
each line in order, prints each reply, and returns after the last reply at end of input, which
lets `iris chat` exit 0. The local user is always allowed (and an admin): it is whoever can
run the process. `/quit` or `/exit` ends the chat like end of input (Ctrl-D); Ctrl-C stops
Iris (the app's signal handler).

On a real terminal lines are edited with the standard library's `readline` (arrows, Ctrl-R
search, history kept across chats in `$XDG_STATE_HOME/iris/chat_history`, mode 600): `input()`
uses it once the module is imported. It runs on the reader thread, which asks for the next line
only after the previous reply was printed, so the prompt never lands in the middle of a reply.
The terminal's settings are saved when the channel opens and put back when it closes, because
a read cut short by Ctrl-C would otherwise leave the terminal without echo.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO

from gateway.core.clock import wall_ms
from gateway.core.formatting import to_plain
from gateway.core.messages import ChatKind, ChatRef, Inbound, Outbound, SentReceipt, UserRef
from gateway.core.ports import InboundHandler

CHANNEL = "console"
QUIT = ("/quit", "/exit")
HISTORY_LINES = 1000
WELCOME = "Iris in your terminal: /help lists the commands; /quit or Ctrl-D leaves."
STOPPING = "Stopping: an answer in progress still comes; nothing typed from now on is read."
LOCAL_CHAT = ChatRef(channel=CHANNEL, chat_id="local")
LOCAL_USER = UserRef(channel=CHANNEL, user_id="local", display_name=os.environ.get("USER", ""))


def line_to_inbound(line: str, message_id: str, at_ms: int) -> Inbound:
    return Inbound(
        chat=LOCAL_CHAT,
        user=LOCAL_USER,
        text=line.rstrip("\r\n"),
        message_id=message_id,
        kind=ChatKind.DM,
        at_ms=at_ms,
    )


class ConsoleChannel:
    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        interactive: bool | None = None,
        history: Path | None = None,
    ) -> None:
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._interactive = self._in.isatty() if interactive is None else interactive
        # Line editing needs the process's own terminal: `input()` reads sys.stdin.
        self._editing = self._in is sys.stdin and self._out is sys.stdout and self._in.isatty()
        self._history = history or _history_file()
        self._tty_state: list[Any] | None = None
        self._want_line = threading.Semaphore(0)
        # Unique across runs, so outbox idempotency keys never collide with an earlier run's.
        self._run_id = str(time.time_ns() // 1_000_000)
        self.done = asyncio.Event()

    @property
    def name(self) -> str:
        return CHANNEL

    async def __aenter__(self) -> Self:
        if self._editing:
            self._tty_state = _save_terminal(self._in)
            _load_history(self._history)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        # The stdin reader is a daemon thread: nothing to join. Put the terminal back.
        if self._editing:
            _save_history(self._history)
            _restore_terminal(self._in, self._tty_state)

    def command_hint(self, command: str) -> str:
        return f"/{command}"

    async def typing(self, chat: ChatRef) -> None:
        return None

    async def send(self, out: Outbound) -> SentReceipt:
        text = to_plain(out.text)
        prefix = "iris> " if self._interactive else ""
        self._out.write(f"{prefix}{text}\n")
        self._out.flush()
        return SentReceipt()

    async def run(self, on_inbound: InboundHandler) -> None:
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        if self._editing:
            self._start_editor(lines)
        else:
            self._start_reader(lines)
        if self._interactive:
            self._out.write(WELCOME + "\n")
        try:
            n = 0
            while True:
                if self._editing:
                    self._want_line.release()  # the editor thread prints the prompt
                elif self._interactive:
                    self._out.write("you> ")
                    self._out.flush()
                line = await lines.get()
                if line is None or line.strip().lower().partition(" ")[0] in QUIT:
                    return
                if not line.strip():
                    continue
                n += 1
                # One line at a time: the next prompt comes after this line's reply.
                inbound = line_to_inbound(line, f"{self._run_id}-{n}", wall_ms())
                for turn in await on_inbound([inbound]):
                    await turn
        except asyncio.CancelledError:  # Ctrl-C: the terminal still echoes what is typed
            if self._interactive:
                self._out.write(f"\n{STOPPING}\n")
                self._out.flush()
            raise
        finally:
            self.done.set()

    def _start_reader(self, lines: asyncio.Queue[str | None]) -> None:
        # Blocking reads happen on a daemon thread: a pending read must not keep the process
        # alive after Ctrl-C, which an executor thread would (it is joined at loop shutdown).
        loop = asyncio.get_running_loop()

        def read() -> None:
            try:
                for line in iter(self._in.readline, ""):
                    loop.call_soon_threadsafe(lines.put_nowait, line)
                loop.call_soon_threadsafe(lines.put_nowait, None)
            except (RuntimeError, ValueError):  # the loop or stdin closed while we read
                return

        threading.Thread(target=read, name="console-stdin", daemon=True).start()

    def _start_editor(self, lines: asyncio.Queue[str | None]) -> None:
        import readline  # noqa: F401  (imported, it makes `input()` edit lines and keep history)

        loop = asyncio.get_running_loop()

        def read() -> None:
            try:
                while True:
                    self._want_line.acquire()
                    try:
                        line: str | None = input("you> ")
                    except EOFError:  # Ctrl-D
                        line = None
                        print(file=sys.stdout, flush=True)
                    loop.call_soon_threadsafe(lines.put_nowait, line)
                    if line is None:
                        return
            except (RuntimeError, ValueError):  # the loop or stdin closed while we read
                return

        threading.Thread(target=read, name="console-editor", daemon=True).start()


def _history_file() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "iris" / "chat_history"


def _load_history(path: Path) -> None:
    import readline

    readline.set_history_length(HISTORY_LINES)
    with contextlib.suppress(OSError):
        readline.read_history_file(path)


def _save_history(path: Path) -> None:
    import readline

    with contextlib.suppress(OSError):  # best effort: a read-only home costs only history
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600, exist_ok=True)
        readline.write_history_file(path)


def _save_terminal(stream: TextIO) -> list[Any] | None:
    try:
        import termios

        return list(termios.tcgetattr(stream.fileno()))
    except (ImportError, OSError):
        return None


def _restore_terminal(stream: TextIO, state: list[Any] | None) -> None:
    if state is None:
        return
    import termios

    with contextlib.suppress(OSError):
        termios.tcsetattr(stream.fileno(), termios.TCSADRAIN, state)
