"""The simulator: deterministic per seed, the invariants hold, the outputs are well formed, and
the progress bar shows only on a terminal."""

from __future__ import annotations

import html
import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.app.cli import main
from proactive import policy, simulate
from proactive.settings import ProactiveSection
from proactive.sim_cli import TerminalProgress, run_simulation
from proactive.sim_facts import Facts, collect
from proactive.sim_report import Send
from proactive.sim_shards import deal
from proactive.simulate import BUSY, SimConfig, user_stream
from vault.db import Vault

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {
    "users", "days", "intents", "triggers", "quiet_hour_violations", "quota_violations",
    "spacing_violations", "duplicates", "non_terminal", "max_sends_per_user_local_day",
    "max_sends_per_user_hour", "min_gap_minutes_per_user", "first_hour_after_quiet_share",
    "max_local_hour_share", "sends_per_local_hour", "sends_per_day", "engagement_per_day",
    "engagement_rate", "settings", "gate_tool_calls",
}  # fmt: skip
INTENT_KEYS = {"registered", "sent", "skipped", "deferred", "expired", "cancelled", "failed",
               "uncertain"}  # fmt: skip
VIOLATIONS = ("quiet_hour_violations", "quota_violations", "spacing_violations", "duplicates",
              "non_terminal")  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["simulate", *args])
    return code, capsys.readouterr().out


def test_simulation_is_deterministic_and_keeps_the_invariants(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, first = run(capsys, "--users", "48", "--days", "4", "--seed", "3", "--json",
                      "--html", str(tmp_path / "r.html"))  # fmt: skip
    assert code == 0
    _, second = run(capsys, "--users", "48", "--days", "4", "--seed", "3", "--json")
    assert first == second
    report = json.loads(first)
    assert report.keys() >= REQUIRED
    assert report["intents"].keys() >= INTENT_KEYS
    assert report["zones"] >= 20
    assert report["intents"]["sent"] > 0
    assert report["reminder_sends"] > 0
    assert sum(report["triggers"].values()) > 0
    for key in VIOLATIONS:
        assert report[key] == 0, key
    assert report["max_sends_per_user_local_day"] <= 3
    assert report["max_gated_sends_per_user_hour"] == 1
    assert report["min_gap_minutes_per_user"]["min"] >= 90
    assert report["gated_gap_minutes"]["< 90 min"] == 0
    hours = report["sends_per_local_hour"]
    assert sum(hours["gated"]) == report["gated_sends"]
    assert sum(hours["gated"][h] for h in (22, 23, 0, 1, 2, 3, 4, 5, 6, 7)) == 0
    assert report["settings"]["global_daily"] == 3 * 48  # raised to what 48 users could use
    page = html.unescape((tmp_path / "r.html").read_text())
    assert page.count("<svg") == 5
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for caption in ("recipient's local time", "UTC calendar days", "Engagement over time",
                    "reminders users asked for (exempt)", "No time-zone basis"):  # fmt: skip
        assert caption in page, caption
    _, other = run(capsys, "--users", "48", "--days", "4", "--seed", "4", "--json")
    assert other != first


def test_a_binding_global_quota_is_kept_and_still_deterministic(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ("--users", "60", "--days", "3", "--seed", "5", "--json", "--global-daily", "4")
    code, first = run(capsys, *args)
    assert code == 0
    assert run(capsys, *args)[1] == first  # ticks that may use up the quota run in order
    report = json.loads(first)
    assert report["settings"]["global_daily"] == 4
    assert report["quota_violations"] == 0
    assert max(report["sends_per_day"]["gated"]) <= 4


def test_text_report_and_bad_arguments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = run(capsys, "--users", "5", "--days", "1")
    assert code == 0
    assert "spacing violations 0" in out
    assert "Invariants: quiet-hour violations 0" in out
    for bad in (["--days", "0"], ["--global-daily", "0"], ["--users", "many"]):
        with pytest.raises(SystemExit) as exc:
            main(["simulate", *bad])
        assert exc.value.code == 2
    assert main(["simulate", "--users", "2", "--days", "1", "--html", "/no/such/dir/r.html"]) == 2


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_progress_shows_on_a_terminal_only() -> None:
    section = ProactiveSection()
    for workers in (1, 2):  # two: the shards' progress relayed from their processes
        out, err = Terminal(), Terminal()
        code = await run_simulation(section, users=3, days=1, seed=1, workers=workers,
                                    as_json=False, html_path=None, out=out, err=err)  # fmt: skip
        assert code == 0
        drawn = err.getvalue()
        assert "simulating [" in drawn and "100%" in drawn and "simulated in" in drawn
        assert "simulating" not in out.getvalue()
    quiet: list[tuple[bool, io.StringIO]] = [(True, Terminal()), (False, io.StringIO())]
    for as_json, report_out in quiet:
        err = Terminal()
        await run_simulation(section, users=3, days=1, seed=1, as_json=as_json, html_path=None,
                             out=report_out, err=err)  # fmt: skip
        assert err.getvalue() == ""  # --json, or output piped: no bar


def test_progress_bar_redraws_only_when_the_percentage_moves() -> None:
    err = Terminal()
    bar = TerminalProgress(err, width=10)
    for done in range(1001):
        bar(done * 86_400, 1000 * 86_400)  # a thousand calls over one simulated day
    assert err.getvalue().count("\r") == 101
    assert "[##########] 100%" in err.getvalue()


def test_the_independent_check_catches_a_bug_in_the_policys_time_helpers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the policy's local-time helper broken (every zone read as UTC), the engine sends in
    the users' quiet hours; the report's own zoneinfo arithmetic counts them, where a check
    built on the policy's helpers would agree with the bug and count none."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(policy, "_DAYS", {})  # the helper's day cache, kept apart from the bug
    monkeypatch.setattr(policy, "local", lambda ms, zone: datetime.fromtimestamp(ms / 1000, UTC))
    code, out = run(capsys, "--users", "48", "--days", "3", "--seed", "3", "--json",
                    "--workers", "1")  # fmt: skip
    report = json.loads(out)
    assert report["quiet_hour_violations"] > 0
    assert sum(report["sends_per_local_hour"]["gated"][h] for h in (22, 23, 0, 1, 2, 3)) > 0
    assert code == 1  # the command fails when the check counts a violation


def test_a_send_injected_into_the_raw_log_is_counted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spacing is enforced twice in the engine (policy and delivery transaction), so no
    engine bug gets one through; the check still reads the raw log: a check-in sent again a
    minute later is a duplicate, a spacing violation and a 1-minute gap."""
    monkeypatch.chdir(tmp_path)
    real = collect

    async def injected(vault: Vault, *, sends: list[Send], **kw: Any) -> Facts:
        first = next(s for s in sends if s.key.startswith("proactive:trigger:"))
        return await real(vault, sends=[*sends, Send(first.at_ms + 60_000, first.key)], **kw)

    args = ("--users", "48", "--days", "3", "--seed", "3", "--json", "--workers", "1")
    clean = json.loads(run(capsys, *args)[1])
    monkeypatch.setattr(simulate, "collect", injected)
    code, out = run(capsys, *args)
    report = json.loads(out)
    assert (clean["duplicates"], clean["spacing_violations"]) == (0, 0)
    assert (report["duplicates"], report["spacing_violations"]) == (1, 1)
    assert report["min_gap_minutes_per_user"]["min"] == 1
    assert report["max_gated_sends_per_user_hour"] == 2
    assert code == 1


def test_the_report_is_the_same_whatever_the_number_of_worker_processes(
    tmp_path: Path,
) -> None:
    """Each user draws from their own stream and the draws are keyed by the items' names, not
    their ids: shards of the population in separate processes give the whole run's report."""
    args = ("--users", "40", "--days", "3", "--seed", "7", "--json", "--workers")
    reports = [iris_simulate(tmp_path, *args, workers) for workers in ("1", "2", "3")]
    assert reports[0].returncode == 0, reports[0].stderr
    assert [r.stdout for r in reports[1:]] == [reports[0].stdout] * 2
    assert all(r.stderr == "" for r in reports)
    report = json.loads(reports[0].stdout)
    assert report["users"] == 40 and report["messages_sent"] > 0


def test_the_users_are_dealt_to_shards_kind_by_kind() -> None:
    """Every user in exactly one shard, and as many of the costly busy ones in each."""
    shards = deal(SimConfig(users=500, seed=2), 3)
    assert sorted(n for s in shards for n in s.users or ()) == list(range(500))
    busy = [sum(user_stream(2, n).random() >= BUSY for n in s.users or ()) for s in shards]
    assert max(busy) - min(busy) <= 1 and min(busy) > 10


def test_a_quota_the_users_could_reach_runs_in_one_process(tmp_path: Path) -> None:
    """The global quota couples the users: with one they could reach, two workers asked for
    give one process (said on stderr) and the report of one."""
    args = ("--users", "30", "--days", "2", "--seed", "5", "--json", "--global-daily", "5")
    one = iris_simulate(tmp_path, *args, "--workers", "1")
    two = iris_simulate(tmp_path, *args, "--workers", "2")
    assert two.stdout == one.stdout and json.loads(one.stdout)["quota_violations"] == 0
    assert "one process" in two.stderr and one.stderr == ""


def iris_simulate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.app", "simulate", *args],
        cwd=cwd, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
