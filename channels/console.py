"""The terminal channel: `iris chat`, a real channel through the same router as the others.

Interactive on a TTY (a prompt, replies prefixed); with piped or redirected stdin it handles
each line in order, prints each reply, and returns after the last reply at end of input, which
lets `iris chat` exit 0. The local user is always allowed (and an admin): it is whoever can
run the process.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from types import TracebackType
from typing import Self, TextIO

from gateway.core.formatting import to_plain
from gateway.core.messages import ChatKind, ChatRef, Inbound, Outbound, SentReceipt, UserRef
from gateway.core.ports import InboundHandler

CHANNEL = "console"
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
    ) -> None:
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._interactive = self._in.isatty() if interactive is None else interactive
        # Unique across runs, so outbox idempotency keys never collide with an earlier run's.
        self._run_id = str(time.time_ns() // 1_000_000)
        self.done = asyncio.Event()

    @property
    def name(self) -> str:
        return CHANNEL

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None  # nothing to close: the stdin reader is a daemon thread

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
        self._start_reader(lines)
        try:
            n = 0
            while True:
                if self._interactive:
                    self._out.write("you> ")
                    self._out.flush()
                line = await lines.get()
                if line is None:
                    return
                if not line.strip():
                    continue
                n += 1
                # One line at a time: the next prompt comes after this line's reply.
                await on_inbound(
                    line_to_inbound(line, f"{self._run_id}-{n}", time.time_ns() // 10**6)
                )
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
