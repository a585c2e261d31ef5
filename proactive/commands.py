"""User commands for proactive messages: /proactive, /quiet, /why, /followups, /cancel.

Settings live in the user's JSON settings (`proactive_enabled`, `quiet_hours`), so turning
proactive messages off or moving quiet hours takes effect at the next policy check of every
pending item — nothing has to be rescheduled. `/tz` (a core command) sets the time zone.
"""

from __future__ import annotations

import re

from gateway.core.errors import UserInputError
from gateway.core.scope import Scope
from gateway.turns.commands import Command, CommandCall, parse_item_id, typed_id
from proactive.gate_run import KEPT, item_label
from proactive.policy import PolicyConfig, local, user_prefs
from vault.conversations import Conversations
from vault.proactive.gate_calls import GateCall, GateCalls
from vault.proactive.items import Source
from vault.proactive.log import ProactiveLog
from vault.proactive.store import ProactiveStore

_QUIET = re.compile(r"(\d{1,2})(?::00)?\s*-\s*(\d{1,2})(?::00)?")


# Said with the user's own setting while `[proactive] enabled = false`: nothing is sent then.
ENGINE_OFF = (
    "(This gateway's admin has switched proactive messages off for now, so none will come "
    "until they switch them back on.)"
)


# What each tool the decision may use did, as a user reads it in `/why` (the model's own
# record of a call, with the tool's name and arguments, is `gate_run.describe`).
DID = {
    "memory_remember": "saved a memory",
    "memory_search": "searched your memories",
    "documents_search": "looked in the team documents",
    "proactive_intent": "scheduled a follow-up",
    "proactive_cancel": "cancelled a follow-up",
    "proactive_list": "looked at your follow-ups",
    "proactive_quota": "checked today's quota",
    "proactive_engage": "noted that you had answered",
}


def unnoted(reason: str | None) -> str:
    """An item's reason without the gate's note of its tool calls (listed in words after)."""
    return (reason or "").split(KEPT, 1)[0]


def told(call: GateCall) -> str:
    did = DID.get(call.tool, call.tool.replace("_", " "))
    outcome = call.result.strip().splitlines()[0][:120] if call.result.strip() else ""
    if call.is_error:
        return f"{did}, which failed" + (f" ({outcome})" if outcome else "")
    return f"{did} ({outcome})" if outcome else did


# The longest quiet hours a user may set: the release window after them must fit before the
# next night (with 23 of 24 hours quiet, a held item's release often fell inside the next
# quiet spell, and a reminder was pushed back night after night until it expired).
MAX_QUIET_HOURS = 20


async def settings_of(conversations: Conversations, scope: Scope) -> dict[str, object]:
    """The user's settings (`/proactive`, `/quiet`): the commands', and what the tools tell
    the model."""
    user = await conversations.get_user(scope.user)
    return dict(user.settings) if user is not None else {}


class ProactiveCommands:
    def __init__(
        self,
        *,
        conversations: Conversations,
        store: ProactiveStore,
        plog: ProactiveLog,
        policy: PolicyConfig,
        calls: GateCalls,
        engine_on: bool = True,
    ) -> None:
        self.engine_on = engine_on
        self.conversations = conversations
        self.store = store
        self.plog = plog
        self.policy = policy
        self.calls = calls

    def commands(self) -> list[Command]:
        return [
            Command("proactive", "turn follow-ups from me on or off", self.proactive,
                    usage="on|off"),
            Command("quiet", "show or set your quiet hours", self.quiet, usage="HH-HH|off|default"),
            Command("why", "why I sent my last proactive message", self.why),
            Command("followups", "list your pending follow-ups", self.followups),
            Command("cancel", "cancel a pending follow-up", self.cancel, usage="ID"),
        ]  # fmt: skip

    async def proactive(self, call: CommandCall) -> str:
        said = await self._proactive(call)
        return said if self.engine_on else f"{said} {ENGINE_OFF}"

    async def _proactive(self, call: CommandCall) -> str:
        arg = call.args.strip().lower()
        scope = call.scope
        if arg in ("on", "off"):
            await self.conversations.update_settings(
                scope.user_pk, {"proactive_enabled": None if arg == "on" else False}
            )
            if arg == "on":
                return "Proactive messages are on: I may follow up (outside your quiet hours)."
            return (
                "Proactive messages are off: I won't start conversations with you. "
                f"Turn them back on with {call.hint('proactive')} on."
            )
        if arg:
            raise UserInputError(f"Usage: {call.hint('proactive')} on|off")
        settings = await self._settings(call)
        state = "on" if settings.get("proactive_enabled", True) is not False else "off"
        return f"Proactive messages are {state}. Change with {call.hint('proactive')} on|off."

    async def quiet(self, call: CommandCall) -> str:
        arg = call.args.strip().lower()
        scope = call.scope
        usage = (
            f"Usage: {call.hint('quiet')} HH-HH (e.g. 22-8, hours 0–23 in your time zone), "
            f"{call.hint('quiet')} off, or {call.hint('quiet')} default"
        )
        if not arg:
            prefs = user_prefs(scope.timezone, await self._settings(call), self.policy)
            if prefs.quiet is None:
                return f"Quiet hours are off for you.\n{usage}"
            start, end = prefs.quiet
            return f"Your quiet hours: {start:02d}:00–{end:02d}:00 ({prefs.zone.key}).\n{usage}"
        if arg in ("off", "default"):
            value: object = "off" if arg == "off" else None
            await self.conversations.update_settings(scope.user_pk, {"quiet_hours": value})
            if arg == "off":
                return "Quiet hours are off: follow-ups may arrive at any hour."
            start, end = self.policy.quiet_start, self.policy.quiet_end
            if start == end:
                return "Quiet hours reset to the default: off, follow-ups may arrive at any hour."
            return f"Quiet hours reset to the default ({start:02d}:00–{end:02d}:00)."
        match = _QUIET.fullmatch(arg)
        if match is None:
            raise UserInputError(usage)
        start, end = int(match.group(1)), int(match.group(2))
        if start > 23 or end > 23:
            raise UserInputError(f"Hours go from 0 to 23. {usage}")
        if start == end:
            raise UserInputError(f"Start and end are the same hour; use off instead. {usage}")
        if (end - start) % 24 > MAX_QUIET_HOURS:  # the release after one night fell in the next
            raise UserInputError(
                f"That leaves fewer than {24 - MAX_QUIET_HOURS} hours a day for follow-ups, and "
                f"held ones would wait night after night; for none at all, "
                f"{call.hint('proactive')} off. {usage}"
            )
        await self.conversations.update_settings(scope.user_pk, {"quiet_hours": [start, end]})
        zone = scope.timezone or f"{self.policy.default_timezone} — set yours with " + call.hint(
            "tz"
        )
        return f"Quiet hours set to {start:02d}:00–{end:02d}:00 ({zone})."

    async def why(self, call: CommandCall) -> str:
        scope = call.scope
        chat = scope.chat_pk if scope.in_group else None  # a group sees only its own
        zone = user_prefs(scope.timezone, {}, self.policy).zone
        last = await self.plog.last(scope.user_pk, chat)
        lines = []
        if last is None:
            lines.append("I haven't sent you any proactive message yet.")
        else:
            when = local(last.sent_at, zone)
            if last.type == "intent":
                origin = (
                    "a reminder you asked for"
                    if last.kind == "user_reminder"
                    else ("a follow-up I registered")
                )
                detail = f'"{last.what}" — because: {last.why or "(no reason given)"}'
                detail += f" (confidence {last.confidence:.2f})"
            else:
                origin = f"an automatic check ({last.kind.replace('_', ' ')})"
                detail = last.what
            lines.append(
                f"My last proactive message (message #{last.log_id}, {when:%Y-%m-%d %H:%M}, "
                f"{last.status}) came from {origin} #{last.source_id}: {detail}.\n"
                f"Outcome: {unnoted(last.reason) or last.status}."
            )
            source: Source = "intent" if last.type == "intent" else "trigger"
            used = await self.calls.of_item(source, last.source_id)
            if used:
                lines.append("While deciding I used: " + "; ".join(told(c) for c in used))
        considered = await self.calls.last_considered(scope.user_pk, chat)
        unsent = await self.calls.last_unsent(scope.user_pk, chat)
        if unsent is not None and (considered is None or unsent.at_ms > considered.at_ms):
            considered = unsent  # ended later, tool calls or not (consent off, a budget)
        if considered is not None and (
            last is None
            or (
                (considered.source, considered.id) != (last.type, last.source_id)
                and considered.at_ms >= last.sent_at
            )
        ):
            verb = {"pending": "put it off", "skipped": "did not send it"}.get(
                considered.status, f"it ended {considered.status}"
            )
            when, why = local(considered.at_ms, zone), unnoted(considered.reason)
            lines.append(
                f"{'Since then' if last else 'But'} I considered "
                f"{item_label(considered.source, considered.id)} ({when:%Y-%m-%d %H:%M}: "
                f'"{considered.what}") and {verb} — {why or considered.status}.'
                + (
                    " What I did while deciding stays done: "
                    + "; ".join(told(c) for c in considered.calls)
                    if considered.calls
                    else ""
                )
            )
        return "\n".join(lines)

    async def followups(self, call: CommandCall) -> str:
        scope = call.scope
        items = [
            i
            for i in await self.store.pending_intents(scope.user_pk)
            if not scope.in_group or i.chat_pk == scope.chat_pk  # a group sees only its own
        ]
        if not items:
            return "You have no pending follow-ups."
        zone = user_prefs(call.scope.timezone, {}, self.policy).zone
        lines = [
            f"#{i.id} {local(i.execute_at, zone):%Y-%m-%d %H:%M}"
            f"{' (reminder)' if i.is_reminder else ''}: {i.what}"
            for i in items
        ]
        listing = f"Pending follow-ups (cancel one with {call.hint('cancel')} ID):\n" + "\n".join(
            lines
        )
        return listing if self.engine_on else f"{listing}\n{ENGINE_OFF}"

    async def cancel(self, call: CommandCall) -> str:
        item_id = parse_item_id(
            call.args, f"Usage: {call.hint('cancel')} ID — the ID is from {call.hint('followups')}."
        )
        scope = call.scope
        if item_id is None or not await self.store.cancel_intent(
            scope.user_pk, item_id, scope.now_ms
        ):
            raise UserInputError(
                f"You have no pending follow-up #{typed_id(call.args)}. "
                f"See {call.hint('followups')}."
            )
        return f"Cancelled follow-up #{item_id}."

    async def _settings(self, call: CommandCall) -> dict[str, object]:
        return await settings_of(self.conversations, call.scope)
