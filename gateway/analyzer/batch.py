"""`iris analyze FILE.jsonl`: run the context analyzer over recorded conversations.

Each input line is `{"id": "...", "messages": ["first user message", ..., "last"]}` (an
optional `"last_reply"` is the assistant's reply before the last message, for the
confirmation model); each output line judges the last message with the earlier ones as the
session's history: `{"id", "suggestion", "frustration", "topic_shift", "mode", "score",
"keywords"}`. This judges detection only — live cooldowns depend on time and earlier tips,
which a file does not have. With embeddings (`semantic`) the messages are embedded as a live
chat would: only those the verdict depends on (`lazy.py`), so a message the structural rules
settle has no score; with a confirmer, a near-threshold case is put to the model exactly as
in a live chat, failing closed. A malformed line is reported on stderr with its line number and
skipped; the exit code is then 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, TextIO

from gateway.analyzer.confirm import Confirmer, ModelCall, decide
from gateway.analyzer.detect import Analysis, Params, judge_conversation, replay
from gateway.analyzer.lazy import judge_lazily
from gateway.analyzer.semantic import SemanticSide


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    messages: list[str]
    last_reply: str | None = None


class BadLine(ValueError):
    pass


def parse_case(line: str) -> Case:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadLine(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise BadLine("expected a JSON object")
    case_id = data.get("id")
    if not isinstance(case_id, str | int) or isinstance(case_id, bool):
        raise BadLine('"id" must be a string or a number')
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadLine('"messages" must be a non-empty list of strings')
    if not all(isinstance(m, str) for m in messages):
        raise BadLine('"messages" must contain only strings')
    last_reply = data.get("last_reply")
    if last_reply is not None and not isinstance(last_reply, str):
        raise BadLine('"last_reply" must be a string')
    return Case(str(case_id), messages, last_reply)


def result_line(case: Case, analysis: Analysis) -> dict[str, Any]:
    return {
        "id": case.id,
        "suggestion": analysis.suggestion or "none",
        "frustration": analysis.frustration,
        "topic_shift": analysis.topic_shift,
        "mode": analysis.mode.value,
        "score": None if analysis.score is None else round(analysis.score, 4),
        # the distance to the deciding threshold (negative: a shift); with the learned models
        # it, not the score, decides
        "margin": None if analysis.margin is None else round(analysis.margin, 4),
        "keywords": list(analysis.keywords),
    }


async def judge(
    case: Case,
    params: Params,
    window: int,
    confirm: tuple[Confirmer, ModelCall] | None = None,
    semantic: SemanticSide | None = None,
) -> Analysis:
    if semantic is not None and semantic.embedder is not None:
        side, earlier = semantic, case.messages[:-1][-window:]

        async def earlier_vectors() -> list[tuple[float, ...]]:
            found = [await side.embed(m) for m in earlier]
            return [v for v in found if v is not None]

        judgement = await judge_lazily(
            side, case.messages[-1], replay(case.messages[:-1], window), params, earlier_vectors
        )
        analysis = judgement.analysis
    else:
        analysis = judge_conversation(case.messages, params, window)
    if confirm is None or not analysis.near(params):
        return analysis
    confirmer, call = confirm
    verdict = await confirmer.confirm(
        call, case.messages[-window - 1 : -1], case.last_reply, case.messages[-1]
    )
    tip = decide(verdict)
    return replace(analysis, topic_shift=tip == "clear", frustration=tip == "compact")


async def run_batch(
    lines: Iterable[str],
    out: TextIO,
    err: TextIO,
    *,
    params: Params,
    window: int,
    confirm: tuple[Confirmer, ModelCall] | None = None,
    semantic: SemanticSide | None = None,
) -> int:
    bad = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            case = parse_case(line)
        except BadLine as exc:
            bad += 1
            print(f"line {number}: {exc}", file=err)
            continue
        analysis = await judge(case, params, window, confirm, semantic)
        print(json.dumps(result_line(case, analysis), ensure_ascii=False), file=out)
    return 1 if bad else 0
