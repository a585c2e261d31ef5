"""Asking questions on the terminal for `iris init`, or answering them from flags.

One `Prompter` serves both modes so the questions are asked in one place: interactive, it
shows the question with the answer it will take on Enter, re-asks until the validator accepts
the answer, and reads secrets without echo on a terminal (`getpass`); non-interactive, it takes
the flag, else the current value, else the default, and a bad value is a one-line error naming
the flag. End of input while asking cancels the whole run: nothing has been written yet.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable
from typing import TextIO

from gateway.app.cli_common import UsageError

# Returns an error message for a bad answer, None for a good one.
Validator = Callable[[str], str | None]


class Cancelled(Exception):
    """The person ended the input (Ctrl-D) or interrupted it."""


def masked(secret: str) -> str:
    return "…" + secret[-4:] if len(secret) > 8 else "(set)"


def _accept(value: str) -> str | None:
    return None


class Prompter:
    def __init__(
        self, *, interactive: bool, stdin: TextIO | None = None, stdout: TextIO | None = None
    ) -> None:
        self.interactive = interactive
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout

    def say(self, text: str = "") -> None:
        if self.interactive:
            print(text, file=self._out, flush=True)

    def _read(self, prompt: str, *, secret: bool = False) -> str:
        if secret and self._in.isatty():
            try:
                return getpass.getpass(prompt)
            except (EOFError, KeyboardInterrupt):
                raise Cancelled from None
        self._out.write(prompt)
        self._out.flush()
        line = self._in.readline()
        if not line:
            raise Cancelled
        return line.strip()

    def ask(
        self,
        question: str,
        *,
        flag: str,
        given: str | None,
        current: str,
        validate: Validator = _accept,
        secret: bool = False,
    ) -> str:
        """The answer: typed (interactive) or `given` (the flag), else `current`."""
        if not self.interactive:
            value = current if given is None else given.strip()
            problem = validate(value) if value or given is not None else None
            if problem:
                raise UsageError(f"{flag}: {problem}")
            return value
        shown = masked(current) if secret and current else current
        suffix = f" [{shown}]" if shown else ""
        while True:
            answer = self._read(f"{question}{suffix}: ", secret=secret) or current
            problem = validate(answer)
            if problem is None:
                return answer
            print(f"  {problem}", file=self._out)

    def confirm(self, question: str, *, default: bool) -> bool:
        if not self.interactive:
            return default
        hint = "Y/n" if default else "y/N"
        while True:
            answer = self._read(f"{question} [{hint}]: ").lower()
            if not answer:
                return default
            if answer in ("y", "yes", "n", "no"):
                return answer.startswith("y")
