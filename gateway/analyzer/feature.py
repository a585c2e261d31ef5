"""The analyzer as a feature: the per-session watcher plugged in through the seam.

It contributes a turn hook (`observe`: every message counts, commands included, and a tip
that was followed is recorded) and a step before the agent (`suggest`: a `/clear` or
`/compact` tip appended to the reply). Nothing when `[analyzer] enabled = false`; its
counters stay readable in `/admin stats` either way (they are vault rows).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.analyzer.settings import AnalyzerSection
from gateway.analyzer.watcher import ContextWatch
from gateway.features.contributions import Contributions
from gateway.turns.commands import Hint
from gateway.turns.turn import Next, Step, Turn
from vault.analyzer import AnalyzerStore

TIPS = {
    "clear": "It looks like we've moved to a new topic — {cmd} starts a fresh conversation.",
    "compact": "If I'm getting this wrong, {cmd} condenses our conversation so we can refocus.",
}


def format_suggestion(command: str, hint: Hint) -> str:
    return "\n\n_Tip: " + TIPS[command].format(cmd=hint(command)) + "_"


class AnalyzerFeature:
    name = "analyzer"

    def __init__(self, settings: AnalyzerSection) -> None:
        self.settings = settings
        self.watcher: ContextWatch | None = None

    def contribute(self, c: Contributions) -> None:
        if not self.settings.enabled:
            return
        s = c.services
        self.watcher = ContextWatch(
            store=AnalyzerStore(s.vault),
            conversations=s.conversations,
            settings=self.settings,
            call=s.call_model if s.model_configured else None,
        )
        c.turn_hook(self.watcher.observe)
        c.step(self._tip_step(self.watcher, s.hint_for))

    @staticmethod
    def _tip_step(watcher: ContextWatch, hint_for: Callable[[str], Hint]) -> Step:
        async def tip(turn: Turn, nxt: Next) -> None:
            command = await watcher.suggest(turn)
            if command is not None:
                turn.suggestion = format_suggestion(command, hint_for(turn.inbound.chat.channel))
            await nxt(turn)

        return tip
