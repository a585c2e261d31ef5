"""The analyzer as a feature: the per-session watcher plugged in through the seam.

It contributes a turn hook (`observe`: every message counts, commands included, and a tip
that was followed is recorded) and a step before the agent: a `/clear` or `/compact` tip
appended to the reply. The judging (embedding the message is its slow part) runs while the
model answers; the reply waits only for what is left of it. A near-threshold case is put to
the confirmation model concurrently with the agent turn; its tip is attached only if it
arrives before the reply is sent (the reply never waits for it) and the call is cancelled
otherwise. Nothing when `[analyzer]
enabled = false`; its counters stay readable in `/admin stats` either way (vault rows).

`embedder` is the local model when the `semantic` extra is installed (the composition root
passes it, shared with the knowledge feature), else None: lexical rules only. Its use is
bounded by `[analyzer] embed_share` (`share.py`: a share of embedding time, a cap on the
jobs waiting for the model — `queue`, its queue when the composition root knows it — and
`spare`, whether the machine has a core to spare; `now`, a monotonic clock in seconds, is
for tests); messages judged by the rules because of these bounds are counted in
`iris_analyzer_embeddings_total{outcome="shed"}`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gateway.analyzer.detect import Analysis, Suggestion
from gateway.analyzer.semantic import SemanticSide
from gateway.analyzer.settings import AnalyzerSection
from gateway.analyzer.share import EmbedShare
from gateway.analyzer.watcher import ContextWatch
from gateway.core.embedding import Embedder
from gateway.features.contributions import Contributions
from gateway.turns.commands import Hint
from gateway.turns.turn import Next, Step, Turn
from vault.analyzer import AnalyzerStore

CONFIRMATION = "analyzer-confirmation"  # the task's name
TIPS = {
    "clear": "It looks like we've moved to a new topic — {cmd} starts a fresh conversation.",
    "compact": "If I'm getting this wrong, {cmd} condenses our conversation so we can refocus.",
}


def format_suggestion(command: str, hint: Hint) -> str:
    return "\n\n_Tip: " + TIPS[command].format(cmd=hint(command)) + "_"


class AnalyzerFeature:
    name = "analyzer"

    def __init__(
        self,
        settings: AnalyzerSection,
        *,
        embedder: Embedder | None = None,
        spare: Callable[[], bool] | None = None,
        queue: Callable[[], int] | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.embedder = embedder if settings.semantic else None
        self.share = EmbedShare(settings.embed_share, now=now, spare=spare, queue=queue)
        self.watcher: ContextWatch | None = None
        self.semantic: SemanticSide | None = None

    def contribute(self, c: Contributions) -> None:
        if not self.settings.enabled:
            return
        s = c.services
        embeddings = s.metrics.counter(
            "iris_analyzer_embeddings_total",
            "Chat messages whose analyzer verdict needed their embedding: embedded, or shed "
            "(judged by the rules alone under the [analyzer] embed_share bounds: its share of "
            "embedding time spent, the model's queue full or no core to spare).",
            ("outcome",),
        )
        self.semantic = SemanticSide(self.embedder, self.share)
        self.watcher = ContextWatch(
            store=AnalyzerStore(s.vault),
            conversations=s.conversations,
            settings=self.settings,
            call=s.call_model if s.model_configured else None,
            semantic=self.semantic,
            on_embedding=embeddings.inc,
        )
        if self.embedder is not None:
            c.background(self.semantic.warm)  # the generic phrasings, before messages need them
        c.turn_hook(self.watcher.observe)
        c.step(self._tip_step(self.watcher, s.hint_for))

    @staticmethod
    def _tip_step(watcher: ContextWatch, hint_for: Callable[[str], Hint]) -> Step:
        async def tip(turn: Turn, nxt: Next) -> None:
            await _alongside(watcher, turn, nxt, hint_for(turn.inbound.chat.channel))

        return tip


async def _alongside(watcher: ContextWatch, turn: Turn, nxt: Next, hint: Hint) -> None:
    """Judge the message (embedding it is the slow part) while the agent turn runs; the reply
    waits for the judging if it is still going (`turn.before_reply`), never for a
    confirmation: a late or failed verdict shows nothing and its call is cancelled."""
    replies_before = turn.replies
    pending: list[Analysis] = []
    confirmed: list[Suggestion] = []

    async def judge() -> None:
        judged = await watcher.judge(turn)  # never raises; saves the session's state
        if judged.now is not None:
            turn.suggestion = format_suggestion(judged.now, hint)
        if judged.pending is not None:
            pending.append(judged.pending)

    async def confirm() -> None:
        await asyncio.wait([judging])  # not `await judging`: cancelling us must not cancel it
        if not pending:
            return
        command = await watcher.confirm(turn)
        # The reply reads `turn.suggestion` right before it starts sending (and counts
        # itself in `turn.replies` in the same step): a verdict after that is dropped.
        if command is not None and turn.replies == replies_before:
            turn.suggestion = format_suggestion(command, hint)
            confirmed.append(command)

    judging = asyncio.create_task(judge())
    turn.before_reply.append(judging)
    # Without a confirmation model nothing is ever pending: no task for it.
    confirming = (
        None if watcher.confirmer is None else asyncio.create_task(confirm(), name=CONFIRMATION)
    )
    try:
        await nxt(turn)
    finally:
        if confirming is not None:
            confirming.cancel()
        try:
            await judging  # short: the state is saved before the turn ends, whatever happened
        finally:
            judging.cancel()  # only if we were cancelled meanwhile
            await asyncio.wait([t for t in (confirming, judging) if t is not None])
    if confirming is not None and not confirming.cancelled() and confirming.exception() is not None:
        watcher.log_failure(turn, confirming.exception())
    if confirmed:
        watcher.shown(turn, confirmed[0])
