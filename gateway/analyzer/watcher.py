"""The stateful side of the context analyzer: session state, cooldowns, confirmation, counters.

Two entry points, both plugged in by the analyzer feature (`gateway/analyzer/feature.py`):

- `suggest(turn)` is the analyzer step's hook, run for chat messages before the agent: it
  judges the message with the pure functions of `gateway/analyzer/detect.py`, applies the cooldowns,
  optionally asks the confirmation model, saves the state and returns "clear", "compact" or
  None. It never executes anything: the step only appends a tip to the reply.
- `observe(turn)` is a turn hook, run for every message including commands (which stop the
  pipeline before the analyzer step). It counts commands as messages and records a suggestion
  as followed when the user runs the suggested command within `FOLLOW_WINDOW` messages.

No suggestion is made until a session has `MIN_SESSION_MESSAGES` earlier messages: `/clear`
and `/compact` open a new session, so this is what keeps the analyzer quiet right after them.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.analyzer.confirm import Confirmer
from gateway.analyzer.detect import Analysis, Params, Suggestion, advance, analyze
from gateway.analyzer.settings import AnalyzerSection
from gateway.core.llm import LLMRequest, LLMResponse, Payer
from gateway.turns.turn import Turn
from vault.analyzer import AnalyzerStore, Event
from vault.conversations import Conversations

log = logging.getLogger(__name__)

# `Agent.call`: one recorded model call for a chat key.
ChatModelCall = Callable[[LLMRequest, str | None], Awaitable[LLMResponse]]

REMEMBERED_SESSIONS = 4096
FOLLOW_WINDOW = 2
MIN_SESSION_MESSAGES = 2
SUGGESTIBLE = ("clear", "compact")


@dataclass(slots=True, kw_only=True)
class WatchState:
    recent: list[list[str]] = field(default_factory=list)
    topic_started_ms: int | None = None
    messages: int = 0  # user messages in this session, commands included
    last_suggestion_ms: int | None = None
    last_suggestion_at: int | None = None  # `messages` when the last tip was shown
    last_command: str | None = None
    followed: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WatchState:
        """Tolerant: a field of the wrong shape is dropped rather than failing the turn."""
        state = cls()
        recent = data.get("recent")
        if isinstance(recent, list):
            state.recent = [
                [w for w in m if isinstance(w, str)] for m in recent if isinstance(m, list)
            ]
        for name in ("topic_started_ms", "last_suggestion_ms", "last_suggestion_at"):
            value = data.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(state, name, value)
        messages = data.get("messages")
        state.messages = messages if isinstance(messages, int) and messages >= 0 else 0
        command = data.get("last_command")
        state.last_command = command if command in SUGGESTIBLE else None
        state.followed = data.get("followed") is True
        return state

    def to_json(self) -> dict[str, Any]:
        # By hand: dataclasses.asdict deep-copies every keyword list (it showed in profiles).
        return {
            "recent": self.recent,
            "topic_started_ms": self.topic_started_ms,
            "messages": self.messages,
            "last_suggestion_ms": self.last_suggestion_ms,
            "last_suggestion_at": self.last_suggestion_at,
            "last_command": self.last_command,
            "followed": self.followed,
        }


def cooling_down(state: WatchState, now_ms: int, settings: AnalyzerSection) -> bool:
    """Is a suggestion blocked? Too early in the session, or too soon after the last one."""
    if state.messages < MIN_SESSION_MESSAGES:
        return True
    if state.last_suggestion_at is None or state.last_suggestion_ms is None:
        return False
    if state.messages - state.last_suggestion_at < settings.cooldown_messages:
        return True
    return now_ms - state.last_suggestion_ms < settings.cooldown_minutes * 60_000


class ContextWatch:
    def __init__(
        self,
        *,
        store: AnalyzerStore,
        conversations: Conversations,
        settings: AnalyzerSection,
        call: ChatModelCall | None = None,
    ) -> None:
        self.store = store
        self.conversations = conversations
        self.settings = settings
        self.params = Params(
            threshold=settings.topic_shift_threshold, min_keywords=settings.min_keywords
        )
        self.confirmer = (
            Confirmer(model=settings.confirm_model, timeout_s=settings.confirm_timeout_s)
            if settings.confirm_model and call is not None
            else None
        )
        self._call = call
        # session -> (the JSON this process stored last, the state it stands for)
        self._saved: OrderedDict[int, tuple[str, WatchState]] = OrderedDict()

    def _load(self, session: int, stored: str) -> WatchState:
        """The session's state as the record step read it; parsed only if it is not the state
        this process saved last (the common case: every turn saves what the next one reads)."""
        known = self._saved.get(session)
        if known is not None and known[0] == stored:
            # A shallow copy: the turn reassigns fields, and `advance` builds a new `recent`
            # rather than changing the lists in place (which would change the cached state).
            return replace(known[1])
        return WatchState.from_json(self.store.parse(session, stored))

    def _save(self, session: int, state: WatchState, now_ms: int, event: Event | None) -> None:
        stored = self.store.save(session, state.to_json(), now_ms=now_ms, event=event)
        self._saved[session] = (stored, replace(state))
        self._saved.move_to_end(session)
        while len(self._saved) > REMEMBERED_SESSIONS:
            self._saved.popitem(last=False)

    async def observe(self, turn: Turn) -> None:
        if turn.command is None or turn.recorded is None:
            return
        session = turn.recorded.session_pk
        state = self._load(session, turn.recorded.analyzer_state)
        state.messages += 1
        name = turn.command[0]
        event = None
        if (
            name == state.last_command
            and not state.followed
            and state.last_suggestion_at is not None
            and state.messages - state.last_suggestion_at <= FOLLOW_WINDOW
        ):
            state.followed = True
            event = Event(kind="followed", command=name, chat=turn.recorded.chat_pk)
        self._save(session, state, turn.now_ms, event)

    async def suggest(self, turn: Turn) -> Suggestion | None:
        """The tip for this message, if any. A failure here never costs the user the reply."""
        try:
            return await self._suggest(turn)
        except Exception:
            log.exception("context analyzer failed for %s", turn.inbound.chat.key)
            return None

    async def _suggest(self, turn: Turn) -> Suggestion | None:
        recorded, scope = turn.recorded, turn.scope
        if recorded is None or scope is None:
            return None
        session = recorded.session_pk
        state = self._load(session, recorded.analyzer_state)
        analysis = analyze(scope.text, state.recent, self.params)
        suggestion = analysis.suggestion
        if suggestion is not None and cooling_down(state, turn.now_ms, self.settings):
            suggestion = None
        elif suggestion == "clear" and self.confirmer is not None:
            analysis, suggestion = await self._confirmed(turn, analysis)
        state.messages += 1
        if analysis.topic_shift or state.topic_started_ms is None:
            state.topic_started_ms = turn.now_ms
        state.recent = advance(state.recent, analysis.keywords, self.settings.recent_messages)
        event = None
        if suggestion is not None:
            state.last_suggestion_ms = turn.now_ms
            state.last_suggestion_at = state.messages
            state.last_command = suggestion
            state.followed = False
            event = Event(kind="shown", command=suggestion, chat=recorded.chat_pk)
        self._save(session, state, turn.now_ms, event)
        return suggestion

    async def _confirmed(
        self, turn: Turn, analysis: Analysis
    ) -> tuple[Analysis, Suggestion | None]:
        assert self.confirmer is not None
        assert self._call is not None
        assert turn.scope is not None
        scope, model_call = turn.scope, self._call
        rows = await self.conversations.history(
            scope.session_pk, limit=2 * self.settings.recent_messages, before_id=scope.message_pk
        )
        earlier = [r.text for r in rows if r.role == "user"][-self.settings.recent_messages :]

        payer = Payer(user_pk=scope.user_pk, timezone=scope.timezone)  # spends the user's budget

        async def call(request: LLMRequest) -> LLMResponse:
            return await model_call(replace(request, payer=payer), scope.chat.key)

        verdict = await self.confirmer.confirm(call, earlier, scope.text)
        if verdict == "continuation":
            return _without_shift(analysis), None
        if verdict == "frustration":
            return _without_shift(analysis), "compact"
        return analysis, "clear"


def _without_shift(analysis: Analysis) -> Analysis:
    return Analysis(
        frustration=analysis.frustration,
        topic_shift=False,
        keywords=analysis.keywords,
        overlap=analysis.overlap,
    )
