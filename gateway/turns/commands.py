"""The slash-command registry: parsing, dispatch, help, and the unknown-command reply.

Commands are plain async functions registered with a name and a one-line summary. They get a
`CommandCall` (the parsed arguments, the turn's `Scope`, and how commands are typed on this
channel) and return the reply text. Telegram's `/cmd@botname` form is accepted; Slack's
`/iris cmd` is translated to `/cmd` by the Slack adapter before it gets here.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.core.errors import NotAllowed, UnknownCommand, UserInputError
from gateway.core.scope import Scope

Hint = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class CommandCall:
    name: str
    args: str
    scope: Scope
    hint: Hint


Handler = Callable[[CommandCall], Awaitable[str]]
DeniedHook = Callable[[CommandCall], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    handler: Handler
    usage: str = ""
    admin_only: bool = False


def parse_command(text: str) -> tuple[str, str] | None:
    """`("clear", "")` for "/clear", `("tz", "Europe/Berlin")` for "/tz@bot Europe/Berlin"."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    head, _, rest = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    if not name or not name.replace("_", "").isalnum():
        return None
    return name, rest.strip()


MAX_ITEM_ID = 2**63 - 1  # SQLite's largest INTEGER: no row has an id beyond it
_ITEM_ID = re.compile(r"#?([0-9]+)")


def parse_item_id(args: str, usage: str) -> int | None:
    """The item number a person typed ("12" or "#12") for commands like `/forget N`.

    Not a number (words, signs, non-ASCII digits) -> `UserInputError(usage)`; a number no item
    can have (0, or beyond SQLite's integers, which it could not even look up) -> None, for
    the caller's "there is no item N" answer. Say the number back with `typed_id`.
    """
    match = _ITEM_ID.fullmatch(args.strip())
    if match is None:
        raise UserInputError(usage)
    digits = match.group(1)
    number = int(digits) if len(digits) <= 19 else 0
    return number if 1 <= number <= MAX_ITEM_ID else None


def typed_id(args: str, limit: int = 24) -> str:
    """What the person typed as an id, short enough for a one-line answer."""
    text = args.strip().removeprefix("#")
    return text if len(text) <= limit else text[:limit] + "…"


class CommandRegistry:
    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}
        # Told about every refused admin-only command (the admin surface audits them).
        self.on_denied: DeniedHook | None = None

    def register(self, *commands: Command) -> None:
        for command in commands:
            if command.name in self._commands:
                raise ValueError(f"command /{command.name} registered twice")
            self._commands[command.name] = command

    def names(self, *, is_admin: bool = False) -> list[str]:
        return [c.name for c in self._commands.values() if is_admin or not c.admin_only]

    def user_commands(self) -> list[Command]:
        return [c for c in self._commands.values() if not c.admin_only]

    def help_text(self, hint: Hint, *, is_admin: bool) -> str:
        lines = ["Commands:"]
        for command in self._commands.values():
            if command.admin_only and not is_admin:
                continue
            usage = f" {command.usage}" if command.usage else ""
            lines.append(f"• {hint(command.name)}{usage} — {command.summary}")
        return "\n".join(lines)

    async def run(self, call: CommandCall) -> str:
        command = self._commands.get(call.name)
        if command is None:
            raise UnknownCommand(
                f"Unknown command {call.hint(call.name)}.\n\n"
                + self.help_text(call.hint, is_admin=call.scope.is_admin)
            )
        if command.admin_only and not call.scope.is_admin:
            if self.on_denied is not None:
                await self.on_denied(call)
            raise NotAllowed(f"{call.hint(call.name)} is not allowed: it is for admins only.")
        return await command.handler(call)
