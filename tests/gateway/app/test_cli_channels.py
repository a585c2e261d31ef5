"""The CLI with platform channels: a rejected token stops `iris run` with one clear line;
`iris doctor --online` asks each platform who we are."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import respx

from gateway.app.channels import check_channels_online
from gateway.app.cli import main
from gateway.app.config import Config, Secrets, Settings
from tests.fakes.slack import BOT_TOKEN, running_fake_slack
from tests.fakes.telegram import BASE, TOKEN, FakeBotAPI, error


def test_rejected_telegram_token_stops_iris_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[vault]\npath = "{tmp_path / "iris.db"}"\n'
        f'[telegram]\nenabled = true\nbase_url = "{BASE}"\n'
    )
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    with respx.mock(assert_all_called=False) as router:
        FakeBotAPI(router).me_response = error(401, "Unauthorized")
        code = main(["run", "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2  # as a configuration error: a service manager does not restart it
    assert "fatal: Telegram rejected TELEGRAM_BOT_TOKEN" in err
    assert TOKEN not in err
    assert "Traceback" not in err


def write_telegram_config(tmp_path: Path) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[vault]\npath = "{tmp_path / "iris.db"}"\n'
        f'[telegram]\nenabled = true\nbase_url = "{BASE}"\n'
    )
    return config


@pytest.mark.parametrize(
    ("me", "expected"),
    [
        (None, "channel telegram online: ok (@iris_bot)"),
        (error(401, "Unauthorized"), "channel telegram online: FAILED — Telegram rejected"),
    ],
)
def test_doctor_online_checks_the_telegram_token(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    me: httpx.Response | None,
    expected: str,
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with respx.mock(assert_all_called=False) as router:
        FakeBotAPI(router).me_response = me
        main(["doctor", "--online", "--config", str(write_telegram_config(tmp_path))])
    out = capsys.readouterr().out
    assert expected in out
    assert TOKEN not in out


async def test_online_check_of_slack_calls_auth_test(tmp_path: Path) -> None:
    async with running_fake_slack() as fake:
        settings = Settings(
            slack={"enabled": True, "mode": "socket", "api_url": f"{fake.url}/api/"},  # type: ignore[arg-type]
        )
        secrets = Secrets({"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": "xapp-1"})
        config = Config(settings=settings, secrets=secrets, source=None)
        assert await check_channels_online(config) == [("slack", True, "bot user UBOT")]
        fake.auth_error = "invalid_auth"
        ((name, good, said),) = await check_channels_online(config)
        assert (name, good) == ("slack", False)
        assert "SLACK_BOT_TOKEN" in said
