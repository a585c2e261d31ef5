"""The simulator: deterministic per seed, the invariants hold, the outputs are well formed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.app.cli import main

REQUIRED = {
    "users", "days", "intents", "triggers", "quiet_hour_violations", "quota_violations",
    "duplicates", "non_terminal", "max_sends_per_user_local_day", "engagement_rate",
}  # fmt: skip
INTENT_KEYS = {"registered", "sent", "skipped", "deferred", "expired", "cancelled", "failed",
               "uncertain"}  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["simulate", *args])
    return code, capsys.readouterr().out


def test_simulation_is_deterministic_and_keeps_the_invariants(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, first = run(capsys, "--users", "24", "--days", "3", "--seed", "3", "--json",
                      "--html", str(tmp_path / "r.html"))  # fmt: skip
    assert code == 0
    _, second = run(capsys, "--users", "24", "--days", "3", "--seed", "3", "--json")
    assert first == second
    report = json.loads(first)
    assert report.keys() >= REQUIRED
    assert report["intents"].keys() >= INTENT_KEYS
    assert report["zones"] >= 20
    assert report["intents"]["sent"] > 0
    assert sum(report["triggers"].values()) > 0
    for key in ("quiet_hour_violations", "quota_violations", "duplicates", "non_terminal"):
        assert report[key] == 0, key
    assert report["max_sends_per_user_local_day"] <= 3
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 3
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    _, other = run(capsys, "--users", "24", "--days", "3", "--seed", "4", "--json")
    assert other != first


def test_text_report_and_bad_arguments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = run(capsys, "--users", "5", "--days", "1")
    assert code == 0
    assert "Invariants: quiet-hour violations 0" in out
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--days", "0"])
    assert exc.value.code == 2
    assert main(["simulate", "--users", "2", "--days", "1", "--html", "/no/such/dir/r.html"]) == 2
