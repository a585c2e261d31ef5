"""`/admin <sub>` (Slack: `/iris admin <sub>`): the admin surface in chat.

Admins are decided by the gateway (`[auth] admins` and the local terminal user), never by the
model. Every admin action is audited with its outcome; refusals are audited through the
registry's `on_denied` hook. Subcommands are pluggable: the core brings `stats`, `users`,
`trace` and `audit`, the app adds `allow` and `deny` (`gateway/admin/access.py`); the
proactive engine adds `intents`, `triggers`, `cancel`, `fire`, `scan` and `quota` when it is
wired.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from itertools import groupby
from typing import Any

from gateway.admin.access import AccessCommands
from gateway.admin.stats import Stats, render
from gateway.agent.traces import TraceStore
from gateway.core.errors import UserInputError
from gateway.core.messages import UserRef
from gateway.core.ports import Clock
from gateway.features.contributions import AdminSub
from gateway.turns.commands import Command, CommandCall
from vault.audit import AuditLog, Outcome
from vault.db import Vault
from vault.reports import Reports

log = logging.getLogger(__name__)


def when(ms: int | None) -> str:
    if not ms:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def audited(action: str, args: dict[str, Any]) -> str:
    """An audit entry's action with its arguments, for people. A chat command's arguments
    repeat its subcommand, already the action's last word: said once."""
    typed = args.get("args")
    if isinstance(typed, str):
        first, _, rest = typed.strip().partition(" ")
        if action.split()[-1:] == [first]:
            args = {**args, "args": rest}
    return " ".join(filter(None, (action, described(args))))


def described(args: dict[str, Any]) -> str:
    """An audit entry's arguments for people: a command's own words as typed, else `key=value`
    pairs (JSON values, strings bare unless they hold a space); empty ones left out."""
    parts = []
    for key, value in args.items():
        if value is None or value in ("", [], {}):
            continue
        if key == "args" and isinstance(value, str):
            parts.append(value)
        elif isinstance(value, str) and not any(c.isspace() for c in value):
            parts.append(f"{key}={value}")
        else:
            parts.append(f"{key}={json.dumps(value, ensure_ascii=False, default=str)}")
    return " ".join(parts)


class AdminCommands:
    def __init__(
        self, *, vault: Vault, audit: AuditLog, stats: Stats, traces: TraceStore, clock: Clock
    ) -> None:
        self.vault = vault
        self.reports = Reports(vault)
        self.audit = audit
        self.stats = stats
        self.traces = traces
        self.clock = clock
        self.subs: dict[str, AdminSub] = {}
        # `allow`/`deny` and the access column of `users`, once the app has built them.
        self.access: AccessCommands | None = None
        self.add(
            AdminSub(
                "stats", "", "messages, model use, suggestions (24 h and 30 days)", self._stats
            )
        )
        self.add(AdminSub("users", "", "known users: last seen, time zone, settings", self._users))
        self.add(
            AdminSub("trace", "", "the context of this chat's last model request", self._trace)
        )
        self.add(AdminSub("audit", "", "recent admin actions", self._audit))

    def add(self, sub: AdminSub) -> None:
        self.subs[sub.name] = sub

    def use_access(self, access: AccessCommands) -> None:
        self.access = access
        for sub in access.subs():
            self.add(sub)

    def command(self) -> Command:
        return Command(
            "admin", "admin tools (admins only)", self.run, usage="<sub> [args]", admin_only=True
        )

    async def denied(self, call: CommandCall) -> None:
        await self._record(call, call.args.split(" ", 1)[0][:40], Outcome.REFUSED, "not allowed")

    async def run(self, call: CommandCall) -> str:
        name, _, args = call.args.strip().partition(" ")
        sub = self.subs.get(name.lower())
        if sub is None:
            return self._help(call, unknown=name)
        try:
            result = await sub.handler(call, args.strip())
        except UserInputError as exc:
            await self._record(call, sub.name, Outcome.ERROR, exc.user_message)
            raise
        except Exception:
            await self._record(call, sub.name, Outcome.ERROR, "internal error")
            raise
        await self._record(call, sub.name, Outcome.OK, result.splitlines()[0] if result else "")
        return result

    def _help(self, call: CommandCall, *, unknown: str) -> str:
        head = f"Unknown admin command '{unknown}'.\n\n" if unknown else ""
        lines = [f"{head}Admin commands:"]
        for sub in self.subs.values():
            usage = f" {sub.usage}" if sub.usage else ""
            lines.append(f"• {call.hint('admin')} {sub.name}{usage} — {sub.summary}")
        return "\n".join(lines)

    async def _record(self, call: CommandCall, action: str, outcome: Outcome, result: str) -> None:
        await self.audit.record(
            actor=call.scope.user.key,
            via=call.scope.chat.channel,
            action=f"admin {action}".strip(),
            args={"args": call.args},
            outcome=outcome,
            result=result,
            now_ms=self.clock.now_ms(),
        )

    async def _stats(self, call: CommandCall, args: str) -> str:
        return render(await self.stats.collect(self.clock.now_ms()))

    async def _users(self, call: CommandCall, args: str) -> str:
        rows = await self.reports.users(limit=100)
        if not rows and self.access is None:
            return "No users yet."
        lines = ["Users (most recent first):"]
        for r in rows:
            name = f" ({r.display_name})" if r.display_name else ""
            proactive = "off" if r.settings.get("proactive_enabled") is False else "on"
            access = ""
            if self.access is not None:
                user = UserRef(channel=r.channel, user_id=r.user_id)
                access = f", access: {self.access.authorizer.access_of(user)}"
            lines.append(
                f"• {r.channel}:{r.user_id}{name} — last seen {when(r.last_seen_ms)}, "
                f"tz {r.timezone or 'default'}, proactive {proactive}{access}"
            )
        if self.access is not None:
            lines += await self.access.users_lines({f"{r.channel}:{r.user_id}" for r in rows})
        return "\n".join(lines)

    async def _trace(self, call: CommandCall, args: str) -> str:
        trace = await self.traces.latest(call.scope.chat.key)
        if trace is None:
            return "No model request in this chat yet."
        runs = [(k, len(list(same))) for k, same in groupby(trace.kept)]  # "history × 12"
        kept = "\n".join(f"  - {k}" + (f" × {n}" if n > 1 else "") for k, n in runs)
        return f"{trace.render()}\nKept:\n{kept}"

    async def _audit(self, call: CommandCall, args: str) -> str:
        entries = await self.audit.recent(limit=20)
        if not entries:
            return "The audit log is empty."
        return "Recent admin actions:\n" + "\n".join(
            f"• {when(e.at_ms)} {e.actor} via {e.via}: {audited(e.action, e.args)} -> {e.outcome}"
            + (f" ({e.result})" if e.result else "")
            for e in entries
        )
