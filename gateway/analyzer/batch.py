"""`iris analyze FILE.jsonl`: run the context analyzer over recorded conversations.

Each input line is `{"id": "...", "messages": ["first user message", ..., "last"]}`; each
output line judges the last message with the earlier ones as the session's history:
`{"id", "suggestion", "frustration", "topic_shift", "keywords"}`. This judges detection only —
live cooldowns depend on time and earlier tips, which a file does not have. With a confirmer,
a suspected topic shift is put to the model as in a live chat. A malformed line is reported on
stderr with its line number and skipped; the exit code is then 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from gateway.analyzer.confirm import Confirmer, ModelCall
from gateway.analyzer.detect import Analysis, Params, judge_conversation


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    messages: list[str]


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
    return Case(str(case_id), messages)


def result_line(case: Case, analysis: Analysis) -> dict[str, Any]:
    return {
        "id": case.id,
        "suggestion": analysis.suggestion or "none",
        "frustration": analysis.frustration,
        "topic_shift": analysis.topic_shift,
        "keywords": list(analysis.keywords),
    }


async def judge(
    case: Case,
    params: Params,
    window: int,
    confirm: tuple[Confirmer, ModelCall] | None = None,
) -> Analysis:
    analysis = judge_conversation(case.messages, params, window)
    if confirm is None or analysis.suggestion != "clear":
        return analysis
    confirmer, call = confirm
    verdict = await confirmer.confirm(call, case.messages[-window - 1 : -1], case.messages[-1])
    if verdict in ("continuation", "frustration"):
        return Analysis(
            frustration=verdict == "frustration",
            topic_shift=False,
            keywords=analysis.keywords,
            overlap=analysis.overlap,
        )
    return analysis


async def run_batch(
    lines: Iterable[str],
    out: TextIO,
    err: TextIO,
    *,
    params: Params,
    window: int,
    confirm: tuple[Confirmer, ModelCall] | None = None,
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
        analysis = await judge(case, params, window, confirm)
        print(json.dumps(result_line(case, analysis), ensure_ascii=False), file=out)
    return 1 if bad else 0
