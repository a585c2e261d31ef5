import io
import json
from pathlib import Path

import pytest

from gateway.analyzer.batch import run_batch
from gateway.analyzer.confirm import Confirmer
from gateway.analyzer.detect import Params
from gateway.app.cli import main
from gateway.core.llm import LLMRequest, LLMResponse
from tests.fakes import FakeLLM

HISTORY = [
    "I want to bake sourdough bread this weekend",
    "My starter is five days old and doubles in about 8 hours",
    "What hydration should I use for a first loaf with bread flour?",
]
SHIFT = "What documents does a freelancer need for a tax return in Spain?"


def write_cases(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def case(case_id: str, messages: list[str]) -> str:
    return json.dumps({"id": case_id, "messages": messages})


def run_cli(
    args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, list[dict[str, object]], str]:
    monkeypatch.chdir(tmp_path)  # no config.toml here: built-in defaults
    code = main(["analyze", *args])
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines()], captured.err


def test_analyze_prints_one_judgement_per_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cases(
        tmp_path,
        [
            case("shift", [*HISTORY, SHIFT]),
            case("angry", [*HISTORY, "No, I said the starter is five days old"]),
            case("fine", [*HISTORY, "ok thanks"]),
            case("solo", ["Größe der Wohnung in München?"]),
        ],
    )
    code, out, err = run_cli([str(path)], tmp_path, monkeypatch, capsys)
    assert (code, err) == (0, "")
    assert [(o["id"], o["suggestion"], o["frustration"], o["topic_shift"]) for o in out] == [
        ("shift", "clear", False, True),
        ("angry", "compact", True, False),
        ("fine", "none", False, False),
        ("solo", "none", False, False),
    ]
    assert out[0]["keywords"] == ["documents", "freelancer", "tax", "return", "spain"]
    assert out[3]["keywords"] == ["grösse", "wohnung", "münchen"]  # casefolded


def test_malformed_lines_are_reported_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cases(
        tmp_path,
        [
            "{not json",
            case("ok1", [*HISTORY, SHIFT]),
            "[1, 2]",
            json.dumps({"id": "x", "messages": []}),
            json.dumps({"id": "y", "messages": ["fine", 3]}),
            json.dumps({"messages": ["no id"]}),
            "",
            case("ok2", ["hello"]),
        ],
    )
    code, out, err = run_cli([str(path)], tmp_path, monkeypatch, capsys)
    assert code == 1
    assert [o["id"] for o in out] == ["ok1", "ok2"]
    assert [line.split(":")[0] for line in err.splitlines()] == [
        "line 1",
        "line 3",
        "line 4",
        "line 5",
        "line 6",
    ]
    assert "not valid JSON" in err


def test_missing_file_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli([str(tmp_path / "nope.jsonl")], tmp_path, monkeypatch, capsys)
    assert (code, out) == (2, [])
    assert err.strip() == f"error: cannot read {tmp_path / 'nope.jsonl'}: no such file or directory"
    (tmp_path / "latin1.jsonl").write_bytes(b"caf\xe9\n")
    code, out, err = run_cli([str(tmp_path / "latin1.jsonl")], tmp_path, monkeypatch, capsys)
    assert (code, out) == (2, [])
    assert err.strip().endswith("latin1.jsonl: not UTF-8 text")


def test_confirm_needs_the_live_confirm_model_and_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    path = write_cases(tmp_path, [case("a", ["hi"])])
    code, _, err = run_cli([str(path), "--confirm"], tmp_path, monkeypatch, capsys)
    assert code == 2
    assert "confirm_model" in err  # the same selection as a live chat: none configured
    (tmp_path / "config.toml").write_text('[analyzer]\nconfirm_model = "claude-haiku-5-5"\n')
    code, _, err = run_cli([str(path), "--confirm"], tmp_path, monkeypatch, capsys)
    assert code == 2
    assert "ANTHROPIC_API_KEY" in err


# Lexical mode; SHIFT scores 0.0, so with this threshold and band it is "near".
NEAR = Params(threshold=0.05, confirm_band=0.1)


async def confirm_batch(llm: FakeLLM, lines: list[str]) -> list[dict[str, object]]:
    out, err = io.StringIO(), io.StringIO()
    code = await run_batch(
        lines,
        out,
        err,
        params=NEAR,
        window=4,
        confirm=(Confirmer(model="cheap", timeout_s=5), llm.complete),
    )
    assert (code, err.getvalue()) == (0, "")
    return [json.loads(line) for line in out.getvalue().splitlines()]


async def test_confirm_asks_the_model_only_near_the_threshold() -> None:
    llm = FakeLLM().enqueue_tool("classify", {"verdict": "continuation"})
    results = await confirm_batch(
        llm, [case("shift", [*HISTORY, SHIFT]), case("fine", [*HISTORY, "ok thanks"])]
    )
    assert [r["suggestion"] for r in results] == ["none", "none"]
    assert len(llm.requests) == 1
    assert (llm.requests[0].model, llm.requests[0].tool_choice) == ("cheap", "classify")


async def test_confirm_may_confirm_a_shift() -> None:
    llm = FakeLLM().enqueue_tool("classify", {"verdict": "topic_shift"})
    (result,) = await confirm_batch(llm, [case("shift", [*HISTORY, SHIFT])])
    assert result["suggestion"] == "clear"


async def test_confirm_failure_fails_closed() -> None:
    for llm in (FakeLLM().enqueue_error(), FakeLLM().enqueue_text("topic_shift")):
        (result,) = await confirm_batch(llm, [case("shift", [*HISTORY, SHIFT])])
        assert result["suggestion"] == "none"


async def test_confirm_fails_closed_on_an_unexpected_error_and_the_run_goes_on() -> None:
    class Broken(FakeLLM):
        async def complete(self, request: LLMRequest) -> LLMResponse:
            raise RuntimeError("a bug in the client")

    results = await confirm_batch(
        Broken(), [case("shift", [*HISTORY, SHIFT]), case("again", [*HISTORY, SHIFT])]
    )
    assert [r["suggestion"] for r in results] == ["none", "none"]
