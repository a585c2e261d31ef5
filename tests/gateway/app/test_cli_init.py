"""`iris init` as a person runs it: a fresh directory, real subprocesses, the token checks
against loopback fakes of Telegram, Slack and the model API."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from tests.gateway.app.loopback import (
    ANTHROPIC_KEY,
    SLACK_APP,
    SLACK_BOT,
    TELEGRAM_TOKEN,
    Services,
    services,
)
from tests.gateway.app.test_cli import iris


@pytest.fixture
def fakes() -> Services:
    with services() as running:
        yield running  # type: ignore[misc]


def toml(tmp_path: Path) -> dict[str, object]:
    return tomllib.loads((tmp_path / "config.toml").read_text())


def test_non_interactive_writes_config_and_private_env_then_doctor_passes(
    tmp_path: Path, fakes: Services
) -> None:
    result = iris(
        tmp_path, "init", "--non-interactive", "--channels", "both",
        "--telegram-token", TELEGRAM_TOKEN, "--slack-bot-token", SLACK_BOT,
        "--slack-app-token", SLACK_APP, "--anthropic-api-key", ANTHROPIC_KEY,
        "--admins", "telegram:1", "--allow", "slack:*,telegram:2", "--timezone", "Europe/Berlin",
        env=fakes.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "next: iris doctor --online && iris run" in result.stdout
    assert sorted(fakes.calls) == [
        f"/bot{TELEGRAM_TOKEN}/getMe",
        "/slack/api/auth.test",
        "/v1/messages",
    ]
    written = (tmp_path / "config.toml").read_text()
    for secret in (TELEGRAM_TOKEN, SLACK_BOT, SLACK_APP, ANTHROPIC_KEY):
        assert secret not in written
    doc = toml(tmp_path)
    assert doc["auth"] == {"admins": ["telegram:1"], "allow": ["slack:*", "telegram:2"]}
    assert doc["proactive"] == {"default_timezone": "Europe/Berlin"}
    env_file = tmp_path / ".env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert f"SLACK_APP_TOKEN={SLACK_APP}" in env_file.read_text()
    doctor = iris(tmp_path, "doctor", "--online", env=fakes.env())
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "channel slack online: ok" in doctor.stdout
    assert "warning" not in doctor.stderr


def test_interactive_asks_again_after_a_rejected_token_and_bad_answers(
    tmp_path: Path, fakes: Services
) -> None:
    answers = [
        "telegram", "999:rejected", TELEGRAM_TOKEN, "", "",  # channels, token x2, mode, model
        ANTHROPIC_KEY, "telegram:*", "telegram:1", "nobody", "none",  # key, admins x2, allow x2
        "Mars/Base", "Asia/Tokyo", "y",  # time zone x2, confirm
    ]  # fmt: skip
    result = iris(tmp_path, "init", stdin="\n".join(answers) + "\n", env=fakes.env())
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "telegram: FAILED — Telegram rejected TELEGRAM_BOT_TOKEN" in out
    assert "telegram: ok (@iris_test_bot)" in out and "model: ok" in out
    assert "an admin is one person, not a wildcard" in out
    assert "'nobody': ids look like telegram:12345" in out
    assert "unknown time zone 'Mars/Base'" in out
    doc = toml(tmp_path)
    assert doc["telegram"] == {"enabled": True, "mode": "polling"}
    assert doc["auth"] == {"admins": ["telegram:1"], "allow": []}
    assert "ANTHROPIC_API_KEY=sk-good" in (tmp_path / ".env").read_text()


def test_rerunning_edits_in_place_and_asks_before_writing(tmp_path: Path) -> None:
    first = iris(tmp_path, "init", "--non-interactive", "--no-check", "--timezone", "UTC")
    assert first.returncode == 0, first.stderr
    config = tmp_path / "config.toml"
    config.write_text(config.read_text() + "\n[router]\n# mine\nmax_concurrency = 7\n")
    declined = iris(tmp_path, "init", "--no-check", stdin="\n\n\n\n\nAsia/Tokyo\nn\n")
    assert declined.returncode == 1 and "nothing was written" in declined.stdout
    assert 'proactive.default_timezone = "Asia/Tokyo"' in declined.stdout
    assert toml(tmp_path)["proactive"] == {"default_timezone": "UTC"}
    accepted = iris(tmp_path, "init", "--non-interactive", "--no-check", "--timezone", "Asia/Tokyo")
    assert accepted.returncode == 0
    text = config.read_text()
    assert "# mine\nmax_concurrency = 7" in text  # other keys and comments survive
    assert toml(tmp_path)["proactive"] == {"default_timezone": "Asia/Tokyo"}
    same = iris(tmp_path, "init", "--non-interactive", "--no-check")
    assert "nothing to change" in same.stdout and config.read_text() == text


def test_secrets_can_come_from_the_environment_and_stay_out_of_the_toml(
    tmp_path: Path, fakes: Services
) -> None:
    env = {**fakes.env(), "TELEGRAM_BOT_TOKEN": TELEGRAM_TOKEN}
    result = iris(tmp_path, "init", "--non-interactive", "--channels", "telegram", env=env)
    assert result.returncode == 0, result.stderr
    assert f"TELEGRAM_BOT_TOKEN={TELEGRAM_TOKEN}" in (tmp_path / ".env").read_text()


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--channels", "irc"], "--channels: unknown channel 'irc'"),
        (["--channels", "telegram"], "--telegram-token: needed (or set TELEGRAM_BOT_TOKEN"),
        (["--channels", "telegram", "--telegram-token", "nope"], "--telegram-token: a bot token"),
        (["--channels", "slack", "--slack-bot-token", "xoxp-user"], "--slack-bot-token: a bot"),
        (["--timezone", "Mars/Base"], "--timezone: unknown time zone 'Mars/Base'"),
        (["--admins", "12345"], "--admins: '12345': ids look like"),
        (["--admins", "telegram:abc"], "--admins: 'telegram:abc': a Telegram user id is a"),
        (["--allow", "slack:u123"], "--allow: 'slack:u123': a Slack user id is upper case"),
        (["--anthropic-api-key", "sk-rejected"], "model: FAILED"),
        (
            ["--channels", "telegram", "--telegram-token", TELEGRAM_TOKEN, "--telegram-mode",
             "webhook", "--telegram-webhook-url", "http://plain"],
            "--telegram-webhook-url: must be a public https:// URL",
        ),
    ],
)  # fmt: skip
def test_bad_flags_are_one_line_and_write_nothing(
    tmp_path: Path, fakes: Services, flags: list[str], error: str
) -> None:
    result = iris(tmp_path, "init", "--non-interactive", *flags, env=fakes.env())
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {error}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_an_unreachable_service_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    env = {"IRIS_TELEGRAM__BASE_URL": "http://127.0.0.1:9/bot"}
    result = iris(
        tmp_path, "init", "--non-interactive", "--channels", "telegram",
        "--telegram-token", TELEGRAM_TOKEN, "--check-timeout", "5", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning: telegram: FAILED" in result.stdout and "not verified" in result.stdout


def test_a_broken_existing_config_is_named_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[llm\n")
    result = iris(tmp_path, "init", "--non-interactive", "--no-check")
    assert result.returncode == 2 and "invalid TOML" in result.stderr
    assert (tmp_path / "config.toml").read_text() == "[llm\n"


def test_end_of_input_cancels_without_writing(tmp_path: Path) -> None:
    result = iris(tmp_path, "init", stdin="telegram\n")
    assert result.returncode == 1 and "nothing was written" in result.stdout
    assert os.listdir(tmp_path) == []
