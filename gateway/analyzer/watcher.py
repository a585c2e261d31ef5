"""The stateful side of the context analyzer: session state, cooldowns, confirmation, counters.

Entry points, plugged in by the analyzer feature (`gateway/analyzer/feature.py`):

- `judge(turn)`, run for chat messages before the agent: judges the message with the pure
  functions of `detect.py`, embedding it (and the earlier messages not embedded yet) only
  when the verdict can depend on it (`lazy.py`; never while the session is cooling down, nor
  while the share of embedding time is spent: `share.py`, counted by `on_embedding`),
  applies the cooldowns and saves the session's state — always, even when the analysis
  itself fails. It returns the tip to show now, or a near-threshold analysis the
  confirmation model should decide.
- `confirm(turn, analysis)`, run by the step concurrently with the agent turn: the model's
  verdict, failing closed; `shown(turn, command)` records a confirmed tip that made it into the
  reply.
- `observe(turn)` is a turn hook, run for every message including commands (which stop the
  pipeline before the analyzer step). It counts commands as messages and records a suggestion
  as followed when the user runs the suggested command within `FOLLOW_WINDOW` messages.

No suggestion is made until a session has `MIN_SESSION_MESSAGES` earlier messages: `/clear`
and `/compact` open a new session, so this is what keeps the analyzer quiet right after them.
The state format is versioned (`state.py`); a state of the previous version is migrated.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from gateway.analyzer.confirm import Confirmer, confirmation_model, decide
from gateway.analyzer.detect import Analysis, Params, Suggestion, advance
from gateway.analyzer.lazy import Judgement, judge_lazily, pending_text, session_vectors
from gateway.analyzer.learned import Learned
from gateway.analyzer.learned import load as load_learned
from gateway.analyzer.semantic import SemanticSide, pack
from gateway.analyzer.settings import AnalyzerSection
from gateway.analyzer.state import WatchState
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


class EmbedOutcome(StrEnum):
    """What became of a message whose verdict needed its embedding."""

    EMBEDDED = "embedded"
    SHED = "shed"  # judged by the rules alone: the share's bounds said no


@dataclass(frozen=True, slots=True)
class Judged:
    now: Suggestion | None = None  # the tip to show with this reply
    pending: Analysis | None = None  # near the threshold: the confirmation model decides


def cooling_down(state: WatchState, now_ms: int, settings: AnalyzerSection) -> bool:
    """Is a suggestion blocked? Too early in the session, or too soon after the last one."""
    if state.messages < MIN_SESSION_MESSAGES:
        return True
    if state.last_suggestion_at is None or state.last_suggestion_ms is None:
        return False
    if state.messages - state.last_suggestion_at < settings.cooldown_messages:
        return True
    return now_ms - state.last_suggestion_ms < settings.cooldown_minutes * 60_000


def params_of(settings: AnalyzerSection, model: str | None = None) -> Params:
    """The analyzer's parameters; `model` names the embedder's model (None: lexical only), for
    the learned models trained on it (`learned.load`) and for the same window of recent
    messages."""
    return Params(
        learned=learned_for(settings, model),
        threshold=settings.topic_shift_threshold,
        min_keywords=settings.min_keywords,
        semantic_threshold=settings.semantic_threshold,
        complaint_threshold=settings.complaint_threshold,
        confirm_band=settings.confirm_band,
    )


_TOLD: set[tuple[str | None, int, bool]] = set()  # what `learned_for` logged, once each


def learned_for(settings: AnalyzerSection, model: str | None) -> Learned | None:
    """The learned models when they are on, trained for `model` and for the configured window
    of recent messages; which way it went is logged once per process."""
    if model is None or not settings.learned:
        return None
    learned = load_learned(model)
    if learned is not None and learned.window != settings.recent_messages:
        told = (model, settings.recent_messages, False)
        if told not in _TOLD:
            _TOLD.add(told)
            log.warning(
                "analyzer: learned models are for recent_messages = %d, not %d; "
                "using the similarity thresholds",
                learned.window,
                settings.recent_messages,
            )
        return None
    told = (model, settings.recent_messages, learned is not None)
    if told not in _TOLD:
        _TOLD.add(told)
        log.info(
            "analyzer: %s",
            "learned models on" if learned else f"no learned models for {model}; similarity",
        )
    return learned


class ContextWatch:
    def __init__(
        self,
        *,
        store: AnalyzerStore,
        conversations: Conversations,
        settings: AnalyzerSection,
        call: ChatModelCall | None = None,
        semantic: SemanticSide | None = None,
        on_embedding: Callable[[EmbedOutcome], None] | None = None,
    ) -> None:
        self.store = store
        self.conversations = conversations
        self.settings = settings
        self.semantic = semantic or SemanticSide(None)
        self.params = params_of(settings, self.semantic.model)
        model = confirmation_model(settings.confirm_model)
        self.confirmer = (
            Confirmer(model=model, timeout_s=settings.confirm_timeout_s)
            if model is not None and call is not None
            else None
        )
        self._call = call
        self._on_embedding = on_embedding
        # session -> (the JSON this process stored last, the state it stands for)
        self._saved: OrderedDict[int, tuple[str, WatchState]] = OrderedDict()

    def _load(self, session: int, stored: str) -> WatchState:
        """The session's state as the record step read it; parsed only if it is not the state
        this process saved last (the common case: every turn saves what the next one reads)."""
        known = self._saved.get(session)
        if known is not None and known[0] == stored:
            # A shallow copy: the turn reassigns fields and never changes the lists in place.
            return replace(known[1])
        return WatchState.from_json(self.store.parse(session, stored))

    def _save(self, session: int, state: WatchState, now_ms: int, event: Event | None) -> None:
        stored = self.store.save(session, state.to_json(), now_ms=now_ms, event=event)
        self._saved[session] = (stored, replace(state))
        self._saved.move_to_end(session)
        while len(self._saved) > REMEMBERED_SESSIONS:
            self._saved.popitem(last=False)

    async def observe(self, turn: Turn) -> None:
        """Count a command (and whether it followed a tip). Never raises but for cancellation."""
        try:
            self._observe(turn)
        except Exception:
            log.exception("context analyzer failed on a command in %s", turn.inbound.chat.key)

    def _observe(self, turn: Turn) -> None:
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

    async def judge(self, turn: Turn) -> Judged:
        """What to do for this message. Never raises (but for cancellation); the session's
        state is saved whatever happens to the analysis."""
        recorded, scope = turn.recorded, turn.scope
        if recorded is None or scope is None:
            return Judged()
        try:
            state = self._load(recorded.session_pk, recorded.analyzer_state)
        except Exception:
            log.exception("analyzer state of session %d unusable", recorded.session_pk)
            state = WatchState()
        analysis: Analysis | None = None
        judgement = None
        try:
            judgement = await judge_lazily(
                self.semantic,
                scope.text,
                state.recent,
                self.params,
                lambda: session_vectors(self.semantic, state),
                cooling=cooling_down(state, turn.now_ms, self.settings),
            )
            analysis = judgement.analysis
            if self._on_embedding is not None and (judgement.shed or judgement.vector is not None):
                self._on_embedding(EmbedOutcome.SHED if judgement.shed else EmbedOutcome.EMBEDDED)
        except Exception:
            log.exception("context analyzer failed for %s", turn.inbound.chat.key)
        judged, event = Judged(), None
        try:
            judged, state, event = self._settle(turn, state, analysis, judgement)
        except Exception:  # no tip; the state keeps what was settled before the failure
            log.exception("context analyzer failed for %s", turn.inbound.chat.key)
        try:
            self._save(recorded.session_pk, state, turn.now_ms, event)
        except Exception:
            log.exception("analyzer state of session %d not saved", recorded.session_pk)
        return judged

    def _settle(
        self,
        turn: Turn,
        state: WatchState,
        analysis: Analysis | None,
        judgement: Judgement | None,
    ) -> tuple[Judged, WatchState, Event | None]:
        """The verdict for this message and the session's state after it."""
        recorded, scope = turn.recorded, turn.scope
        assert recorded is not None and scope is not None
        # A shed message is not put to the confirmation model either: no paid call under load.
        shed = judgement is not None and judgement.shed
        judged = self._decide(state, analysis, turn.now_ms, confirm=not shed)
        state.messages += 1
        if analysis is not None:
            if analysis.topic_shift or state.topic_started_ms is None:
                state.topic_started_ms = turn.now_ms
            state.recent = advance(state.recent, analysis.keywords, self.settings.recent_messages)
        model = self.semantic.model
        if judgement is not None and model is not None:
            window = self.settings.recent_messages
            if judgement.vector is not None:
                vector = judgement.vector
                state = state.with_vector(model, (pack(vector), vector), window)
            elif judgement.deferred:
                state = state.with_vector(model, pending_text(scope.text), window)
        event = None
        if judged.now is not None:
            state.mark_shown(judged.now, turn.now_ms)
            event = Event(kind="shown", command=judged.now, chat=recorded.chat_pk)
        return judged, state, event

    def _decide(
        self, state: WatchState, analysis: Analysis | None, now_ms: int, *, confirm: bool = True
    ) -> Judged:
        if analysis is None or (analysis.suggestion is None and not analysis.near(self.params)):
            return Judged()
        if cooling_down(state, now_ms, self.settings):
            return Judged()
        if analysis.frustration:
            return Judged(now="compact")
        if confirm and self.confirmer is not None and analysis.near(self.params):
            return Judged(pending=analysis)
        return Judged(now=analysis.suggestion)

    async def confirm(self, turn: Turn) -> Suggestion | None:
        """The confirmation model's tip for this message; None on any doubt (fails closed)."""
        assert self.confirmer is not None and self._call is not None
        scope, model_call = turn.scope, self._call
        assert scope is not None
        rows = await self.conversations.history(
            scope.session_pk, limit=2 * self.settings.recent_messages, before_id=scope.message_pk
        )
        earlier = [r.text for r in rows if r.role == "user"][-self.settings.recent_messages :]
        replies = [r.text for r in rows if r.role == "assistant"]
        payer = Payer(user_pk=scope.user_pk, timezone=scope.timezone)  # spends the user's budget

        async def call(request: LLMRequest) -> LLMResponse:
            return await model_call(replace(request, payer=payer), scope.chat.key)

        verdict = await self.confirmer.confirm(
            call, earlier, replies[-1] if replies else None, scope.text
        )
        tip = decide(verdict)
        return "clear" if tip == "clear" else "compact" if tip == "compact" else None

    def shown(self, turn: Turn, command: Suggestion) -> None:
        """Record a confirmed tip that went out with the reply (state and counter)."""
        recorded = turn.recorded
        assert recorded is not None
        state = self._load(recorded.session_pk, self._saved_json(recorded.session_pk))
        state.mark_shown(command, turn.now_ms)
        event = Event(kind="shown", command=command, chat=recorded.chat_pk)
        self._save(recorded.session_pk, state, turn.now_ms, event)

    def log_failure(self, turn: Turn, exc: BaseException | None) -> None:
        log.error("analyzer confirmation failed for %s", turn.inbound.chat.key, exc_info=exc)

    def _saved_json(self, session: int) -> str:
        known = self._saved.get(session)
        return known[0] if known is not None else ""
