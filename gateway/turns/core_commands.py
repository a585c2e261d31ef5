"""The core commands: /start /help /clear /compact /status /tz /memory /forget.

None calls the model except /compact, which asks it for a summary of the session; the summary
then replaces the session's history in the context (the old messages stay in the vault).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from gateway.agent.agent import Agent, payer_of
from gateway.agent.providers import unread_stand_in
from gateway.core.clock import check_timezone
from gateway.core.errors import UserInputError
from gateway.core.llm import LLMMessage
from gateway.turns.commands import (
    Command,
    CommandCall,
    CommandRegistry,
    parse_item_id,
    typed_id,
)
from vault.conversations import Conversations
from vault.memories import Memories

COMPACT_HISTORY_LIMIT = 400


class CoreCommands:
    def __init__(
        self,
        *,
        registry: CommandRegistry,
        conversations: Conversations,
        memories: Memories,
        agent: Agent,
        context_budget: int,
        default_timezone: str,
        max_message_chars: int = 0,
    ) -> None:
        self.registry = registry
        self.conversations = conversations
        self.memories = memories
        self.agent = agent
        self.context_budget = context_budget
        self.max_message_chars = max_message_chars  # longer user messages are not read
        self.default_timezone = default_timezone

    def commands(self) -> list[Command]:
        return [
            Command("start", "introduction and commands", self.start),
            Command("help", "list the commands", self.help),
            Command("clear", "start a fresh conversation", self.clear),
            Command(
                "compact", "summarize this conversation and continue from the summary", self.compact
            ),
            Command("status", "model, context size, memories and budget", self.status),
            Command("tz", "show or set your time zone", self.tz, usage="[Area/City]"),
            Command("memory", "list what I remember about you", self.memory),
            Command(
                "forget", "delete memory number N, or all of them", self.forget, usage="N | all"
            ),
        ]

    async def start(self, call: CommandCall) -> str:
        return (
            "Hi, I'm Iris. Write to me like to a colleague; I remember what matters and may "
            "follow up later — within your quiet hours, and only if you want that.\n\n"
            + await self.help(call)
        )

    async def help(self, call: CommandCall) -> str:
        return self.registry.help_text(call.hint, is_admin=call.scope.is_admin)

    async def clear(self, call: CommandCall) -> str:
        await self.conversations.restart_session(
            call.scope.chat_pk, summary=None, now_ms=call.scope.now_ms
        )
        return "Started a fresh conversation. Earlier messages stay saved, out of my context."

    async def compact(self, call: CommandCall) -> str:
        scope = call.scope
        rows = await self.conversations.history(scope.session_pk, limit=COMPACT_HISTORY_LIMIT)
        if not rows and not scope.summary:
            return "Nothing to compact yet."
        limit = self.max_message_chars
        history = [
            LLMMessage.user(unread_stand_in(r.role, r.text, limit) or r.text)
            if r.role == "user"
            else LLMMessage.assistant(r.text)
            for r in rows
        ]
        summary = await self.agent.summarize(scope, history, scope.summary)
        await self.conversations.restart_session(
            scope.chat_pk, summary=summary, now_ms=scope.now_ms
        )
        return f"Compacted. I'll continue from this summary:\n\n{summary}"

    async def status(self, call: CommandCall) -> str:
        scope = call.scope
        messages, tokens = await self.conversations.session_stats(scope.session_pk)
        summary_tokens = len(scope.summary) // 4 if scope.summary else 0
        memories = await self.memories.count(scope.user_pk)
        model = self.agent.model if self.agent.llm is not None else "none (set ANTHROPIC_API_KEY)"
        guard = self.agent.guard
        budget = await guard.remaining(payer_of(scope)) if guard is not None else None
        return (
            f"Model: {model}\n"
            f"In context: {messages} message{'' if messages == 1 else 's'}, "
            f"~{tokens + summary_tokens} of "
            f"{self.context_budget} tokens{' (with a summary)' if scope.summary else ''}\n"
            f"Memories: {memories}\n"
            f"Time zone: {scope.timezone or self.default_timezone + ' (default)'}"
            + (f"\n{budget}" if budget else "")
        )

    async def tz(self, call: CommandCall) -> str:
        scope = call.scope
        name = call.args.strip()
        if not name:
            current = scope.timezone or f"{self.default_timezone} (default)"
            return f"Your time zone is {current}. Set it with {call.hint('tz')} Area/City."
        try:
            zone = check_timezone(name)
        except ValueError:
            raise UserInputError(
                f"'{name[:64]}' is not a time zone I know. Use an IANA name such as "
                f"Europe/Berlin or America/New_York: {call.hint('tz')} Area/City"
            ) from None
        await self.conversations.set_timezone(scope.user_pk, zone)
        local = datetime.fromtimestamp(scope.now_ms / 1000, UTC).astimezone(ZoneInfo(zone))
        return f"Time zone set to {zone} (your local time is {local:%H:%M})."

    async def memory(self, call: CommandCall) -> str:
        if call.scope.in_group:  # others read the reply: memories stay between user and Iris
            return (
                "Your memories are private, so I don't list them here. Send me "
                f"{call.hint('memory')} in a direct message."
            )
        found = await self.memories.listing(call.scope.user_pk)
        if not found:
            return "I don't remember anything about you yet."
        lines = [f"{m.id}. {m.text}" for m in found]
        return (
            "What I remember (delete one with " + call.hint("forget") + " N):\n" + "\n".join(lines)
        )

    async def forget(self, call: CommandCall) -> str:
        if call.args.strip().lower() == "all":
            gone = await self.memories.forget_all(call.scope.user_pk)
            if gone == 0:
                return "There was nothing to forget: I remember nothing about you."
            return f"Forgotten: all {gone} memor{'y' if gone == 1 else 'ies'}."
        number = parse_item_id(
            call.args,
            f"Usage: {call.hint('forget')} N — N is a number from {call.hint('memory')} — or "
            f"{call.hint('forget')} all.",
        )
        if number is None or not await self.memories.forget(call.scope.user_pk, number):
            raise UserInputError(
                f"There is no memory number {typed_id(call.args)}. See {call.hint('memory')}."
            )
        return f"Forgotten: memory {number}."
