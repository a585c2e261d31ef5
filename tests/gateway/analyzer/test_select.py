"""The threshold-selection rule's shortcut judges exactly as the analyzer does."""

from dataclasses import replace

import pytest

from bench import analyzer_select as sel
from gateway.analyzer.detect import Params, judge_conversation

BREAD, TAXES, HALFWAY = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.85, 0.527, 0.0)
HISTORY = ["I bake sourdough bread every weekend", "My starter doubles in five hours"]
CASES = [
    ("How do I renew my passport?", TAXES, 0.5, "clear"),
    ("How do I renew my passport?", HALFWAY, 0.5, "none"),
    ("By the way, how do I renew my passport?", HALFWAY, 0.5, "clear"),
    ("Is that normal?", TAXES, 0.5, "none"),
    ("this whole exchange is a waste of my evening", BREAD, 0.95, "compact"),
    ("merci beaucoup, c'est très clair", BREAD, 0.95, "none"),
    ("forget that, let me try again", BREAD, 0.1, "compact"),
]


@pytest.mark.parametrize("params", [Params(), Params(semantic_threshold=0.86, cue_bonus=0.0)])
def test_the_shortcut_verdict_is_the_analyzers(params: Params) -> None:
    cases = [{"messages": [*HISTORY, text], "expect": e} for text, _, _, e in CASES]
    analyses = [
        judge_conversation(c["messages"], params, vectors=[BREAD, BREAD, v], complaint=s)
        for c, (_, v, s, _) in zip(cases, CASES, strict=True)
    ]
    scored = sel.prepare(cases, analyses, [s for _, _, s, _ in CASES])
    for case, analysis in zip(scored, analyses, strict=True):
        assert sel.verdict(case, params) == (analysis.suggestion or "none")


def test_the_rule_keeps_false_tips_under_its_bound() -> None:
    cases = [{"messages": [*HISTORY, text], "expect": e} for text, _, _, e in CASES]
    params = Params()
    analyses = [
        judge_conversation(c["messages"], params, vectors=[BREAD, BREAD, v], complaint=s)
        for c, (_, v, s, _) in zip(cases, CASES, strict=True)
    ]
    scored = sel.prepare(cases, analyses, [s for _, _, s, _ in CASES])
    chosen = sel.select(scored, params, semantic=True)
    assert sel.tally(scored, chosen)["false_tips"][0] == 0
    assert sel.prf(*sel.tally(scored, chosen)["clear"])[2] == 1.0
    held = sel.leave_one_out({"a": scored[:4], "b": scored[4:]}, replace(params), semantic=True)
    assert [name for name, _, _ in held] == ["a", "b"]
