"""`iris run` with a platform channel whose token is rejected: one clear line, exit code 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import respx

from gateway.cli import main
from tests.telegram_fake import BASE, TOKEN, FakeBotAPI, error


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
    assert code == 1
    assert "fatal: Telegram rejected TELEGRAM_BOT_TOKEN" in err
    assert TOKEN not in err
    assert "Traceback" not in err
