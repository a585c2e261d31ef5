"""The self-tuning rules: demotion of a type dismissed far more than used, and a penalty for
items like one dismissed in the chat."""

from __future__ import annotations

from pathlib import Path

from gateway.suggestions.settings import SuggestionsSection
from gateway.suggestions.tuning import demoted_types
from tests.gateway.suggestions.support import world_for
from vault.suggestions import NewSuggestion, TypeCounts

S = SuggestionsSection(demote_min_shown=10, demote_ratio=3.0, demote_factor=0.75)


def test_a_type_is_demoted_only_with_enough_evidence() -> None:
    counts = {
        "doc": TypeCounts(shown=12, used=1, dismissed=9),  # 9 > 3 x 1: demoted
        "memory": TypeCounts(shown=12, used=3, dismissed=9),  # 9 = 3 x 3: not
        "warning": TypeCounts(shown=9, used=0, dismissed=9),  # too few shown: not yet
        "change": TypeCounts(shown=10, used=0, dismissed=4),  # never used, 4 > 3 x 1: demoted
    }
    assert demoted_types(counts, S) == {"doc", "change"}


async def test_a_demoted_type_and_a_similar_dismissal_lower_relevance(tmp_path: Path) -> None:
    async with world_for(tmp_path, demote_min_shown=2, demote_ratio=1.0) as w:
        scope = await w.scope()
        text = "the canary deploy failed, how do I roll back the release?"
        (before,) = await w.feature.finder.find(scope, text, limit=1)
        tuned = await w.feature.tuning.adjust(scope.chat_pk, [before], scope.now_ms)
        assert tuned[0].relevance == before.relevance  # no feedback yet
        other = await w.scope("u2", "c2")
        item = NewSuggestion(item_key="doc:999", type="doc", title="Runbook: rolling back",
                             summary="roll back a deploy", content="", relevance=0.9,
                             reason="r")  # fmt: skip
        for chat in (other.chat_pk, other.chat_pk):
            (sid,) = await w.feature.store.add_block(chat=chat, user=other.user_pk, items=[item],
                                                     now_ms=scope.now_ms)  # fmt: skip
            await w.feature.store.mark_shown([sid], scope.now_ms)
            assert await w.feature.store.decide(sid, chat, "dismissed", scope.now_ms)
        w.feature.tuning.forget()
        (demoted,) = await w.feature.tuning.adjust(scope.chat_pk, [before], scope.now_ms)
        assert demoted.relevance == round(before.relevance * 0.75, 4)  # doc: demoted everywhere
        (here,) = await w.feature.tuning.adjust(other.chat_pk, [before], scope.now_ms)
        assert here.relevance < demoted.relevance  # and like an item dismissed in that chat
