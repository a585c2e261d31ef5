"""The slash-command registry: parsing, dispatch, help, and the unknown-command reply.

Commands are plain async functions registered with a name and a one-line summary. They get a
`CommandCall` (the parsed arguments, the turn's `Scope`, and how commands are typed on this
channel) and return the reply text. Telegram's `/cmd@botname` form is accepted; Slack's
`/iris cmd` is translated to `/cmd` by the Slack adapter before it gets here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.core.errors import NotAllowed, UnknownCommand
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
