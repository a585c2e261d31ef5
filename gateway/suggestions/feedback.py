"""Use and Dismiss: the commands, the model tools, and what "Use" does to the next request.

`/use N` and `/dismiss N` act on the Nth item of the last block shown in this chat (the
terminal's way, and every channel's fallback); platform buttons and the tool name a suggestion
by id, which must belong to this chat (else "not found", whatever exists elsewhere). A used
item goes into the next model request of this chat exactly once, through the `suggestions`
context provider, and the answer says so. A dismissed one never comes back in this chat and
lowers similar ones (`tuning.py`). `/suggestions off|on` is per user; admins add `chat` to
switch a whole chat.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gateway.agent.context import ContextItem, Phase, Position
from gateway.agent.tools import Offered, Tool
from gateway.core.errors import NotFound, ToolError, UserInputError, VaultError, WrongState
from gateway.core.scope import Scope
from gateway.knowledge.provider import inert
from gateway.suggestions.finder import Finder, ItemType
from gateway.suggestions.tuning import Tuning
from gateway.turns.commands import Command, CommandCall
from vault.audit import AuditLog, Outcome
from vault.suggestions import SuggestionRow, SuggestionStore

log = logging.getLogger(__name__)


class Action(StrEnum):
    USED = "used"
    DISMISSED = "dismissed"


class Feedback:
    def __init__(
        self, store: SuggestionStore, tuning: Tuning, audit: AuditLog | None = None
    ) -> None:
        self.store = store
        self.tuning = tuning
        self.audit = audit  # admins' switches for a whole chat are audited

    async def by_ordinal(self, scope: Scope, number: int) -> SuggestionRow:
        block = await self.store.latest_block(scope.chat_pk)
        found = next((r for r in block if r.ordinal == number), None)
        if found is None:
            if not block:
                raise NotFound("there is no suggestion to act on in this chat")
            raise NotFound(f"the last suggestions are numbered 1 to {len(block)}")
        return found

    async def by_id(self, scope: Scope, suggestion: int) -> SuggestionRow:
        row = await self.store.get(suggestion)
        if row is None or row.chat != scope.chat_pk:  # another chat's: as if it did not exist
            raise NotFound("no such suggestion in this chat")
        return row

    async def apply(self, scope: Scope, row: SuggestionRow, action: Action) -> str:
        if row.status == action.value:
            return self._said(row, action)
        if not await self.store.decide(row.id, scope.chat_pk, action.value, scope.now_ms):
            raise WrongState(f"that suggestion was already {row.status}")
        self.tuning.forget()
        return self._said(row, action)

    @staticmethod
    def _said(row: SuggestionRow, action: Action) -> str:
        if action is Action.USED:
            if row.item_key.startswith("doc:"):  # its sections that fit, not the whole file
                return (
                    f"Added the part of “{row.title}” that fits this conversation to the context "
                    "of your next message."
                )
            return f"Added “{row.title}” to the context of your next message."
        return f"Dismissed “{row.title}”: it won't be suggested in this chat again."

    # --- commands ----------------------------------------------------------------------

    def commands(self) -> list[Command]:
        return [
            Command("use", "use suggestion N in your next message", self._use, usage="N"),
            Command("dismiss", "hide suggestion N in this chat", self._dismiss, usage="N"),
            Command("suggestions", "turn inline suggestions off or on", self._switch,
                    usage="off|on [chat]"),
        ]  # fmt: skip

    async def _use(self, call: CommandCall) -> str:
        return await self.apply(call.scope, await self._row(call), Action.USED)

    async def _dismiss(self, call: CommandCall) -> str:
        return await self.apply(call.scope, await self._row(call), Action.DISMISSED)

    async def _row(self, call: CommandCall) -> SuggestionRow:
        """`N`: item N of the last block shown here; `#ID` (what a button sends): that one."""
        text = call.args.strip()
        if text.startswith("#") and text[1:].isdigit() and len(text) <= 19:
            return await self.by_id(call.scope, int(text[1:]))
        return await self.by_ordinal(call.scope, _number(call))

    async def _switch(self, call: CommandCall) -> str:
        words = call.args.lower().split()
        if not words or words[0] not in ("on", "off") or words[1:] not in ([], ["chat"]):
            raise UserInputError(f"usage: {call.hint('suggestions')} off|on [chat]")
        off = words[0] == "off"
        scope = call.scope
        if words[1:] == ["chat"]:
            action = f"suggestions {words[0]} chat"
            if not scope.is_admin:
                refused = "only admins switch suggestions for a whole chat"
                await self._audit(scope, action, Outcome.REFUSED, refused)
                raise UserInputError(refused)
            await self.store.set_off("chat", scope.chat_pk, off, scope.now_ms)
            done = f"Suggestions are {'off' if off else 'on'} for everyone in this chat."
            await self._audit(scope, action, Outcome.OK, done)
            return done
        await self.store.set_off("user", scope.user_pk, off, scope.now_ms)
        return f"Suggestions are {'off' if off else 'on'} for you."

    async def _audit(self, scope: Scope, action: str, outcome: Outcome, result: str) -> None:
        if self.audit is None:
            return
        try:  # the switch (or the refusal) stands; a missing audit row is logged
            await self.audit.record(
                actor=scope.user.key, via=scope.chat.channel, action=action,
                args={"chat": scope.chat.key}, outcome=outcome, result=result,
                now_ms=scope.now_ms,
            )  # fmt: skip
        except VaultError:
            log.exception("could not audit %s by %s", action, scope.user.key)


def _number(call: CommandCall) -> int:
    text = call.args.strip()
    if not text.isdigit() or not 1 <= int(text) <= 99:
        raise UserInputError(f"usage: {call.hint(call.name)} N (the number of the suggestion)")
    return int(text)


class UsedProvider:
    """Items the user chose with "Use", given to the next request of their chat once."""

    name = "suggestions"
    phase = Phase.ENRICH
    priority = 45

    def __init__(self, store: SuggestionStore) -> None:
        self.store = store

    async def provide(self, scope: Scope) -> list[ContextItem] | None:
        rows = await self.store.take_used(scope.chat_pk, scope.now_ms)
        if not rows:
            return None
        return [
            ContextItem(
                source=self.name,
                position=Position.SYSTEM,
                content=_used(r),
                relevance=0.9,
                reason="used suggestion",
                label=r.title,
                key=f"suggestion:{r.id}",
            )
            for r in rows
        ]


# A changed document's new text, given beside the copy the session already has (which its
# refresh policy or cooldown keeps as it was): the model is told which one is current.
CHANGED_NOTE = (
    "the current text of a team document that changed since the copy given earlier in this "
    "request; where the two differ, this one is current"
)


def _used(row: SuggestionRow) -> str:
    """The text a used item adds to the request; its content (a document's, a memory's) is
    data, so it can open or close no <document> element."""
    what = CHANGED_NOTE if row.type == ItemType.CHANGE else row.type
    return f"The user chose to use this suggested item ({what}): {inert(row.content)}"


# --- model tools ---------------------------------------------------------------------------

SUGGEST_TOOL = (
    "Items in scope of this chat that the conversation would want (a decision, a changed "
    "document, a runbook, the user's notes, a pending follow-up, a warning), each with an id, a "
    "relevance and a reason. Use it when the user asks what is relevant or what they may be "
    "missing."
)
FEEDBACK_TOOL = (
    "Record the user's feedback on a suggestion shown in this chat: `used` puts it into the "
    "next request, `dismissed` hides it here. `number` is its number in the last block."
)


class SuggestArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    about: str = Field("", max_length=2000, description="what to look for; default the message")


class FeedbackArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    number: int = Field(ge=1, le=99)
    action: Action


def tools(
    finder: Finder, feedback: Feedback, min_relevance: float, offered: Offered | None = None
) -> list[Tool]:
    """`context_suggest` and `suggestion_feedback`, offered when `offered` says so."""

    async def suggest(scope: Scope, args: SuggestArgs) -> str:
        found = await finder.find(scope, args.about or scope.text, limit=5,
                                  min_relevance=min_relevance)  # fmt: skip
        if not found:
            return "nothing relevant enough in scope of this chat"
        return "\n".join(
            f"- [{c.type.value}] {c.title} (relevance {c.relevance:.2f}): {c.summary}. "
            f"Why: {c.reason}"
            for c in found
        )

    async def give_feedback(scope: Scope, args: FeedbackArgs) -> str:
        try:
            row = await feedback.by_ordinal(scope, args.number)
            return await feedback.apply(scope, row, args.action)
        except UserInputError as exc:  # our own texts: safe to show the model
            raise ToolError(str(exc)) from exc

    return [
        Tool("context_suggest", SUGGEST_TOOL, SuggestArgs, suggest, offered=offered),
        Tool("suggestion_feedback", FEEDBACK_TOOL, FeedbackArgs, give_feedback, offered=offered),
    ]
