"""What the `iris` subcommand modules share: the usage error, the runner type, help format.

Each `cli_*.py` module adds its subcommands with `add_command`, so `--help` looks the same
everywhere: every option has a description, and its default is shown.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from gateway.app.config import Config
from gateway.core.errors import IrisError

# Runs after the configuration loaded (exit code 2 before it runs when it is bad).
Runner = Callable[[argparse.Namespace, Config], Coroutine[Any, Any, int]]
# Runs without loading the configuration (`iris init` writes it; it may not exist yet).
PlainRunner = Callable[[argparse.Namespace], int]


class UsageError(IrisError):
    """A bad command-line argument (exit code 2)."""


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default after its description: `(default: 10.0)`, `(default: off)`
    for a switch. An option whose default is None says in its own help what happens without
    it (a test checks every option of every command)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if not action.option_strings:
            return text
        if action.default is False:
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


Subparsers = Any  # argparse's private _SubParsersAction


def add_command(
    sub: Subparsers,
    name: str,
    summary: str,
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
    runner: Runner | None = None,
    plain: PlainRunner | None = None,
    quiet: bool = False,
    description: str | None = None,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        parents=list(parents),
        help=summary,
        description=description or summary,
        formatter_class=HelpFormatter,
    )
    if runner is not None:
        parser.set_defaults(runner=runner, quiet=quiet)
    if plain is not None:
        parser.set_defaults(plain=plain)
    return parser
