"""The configuration's other sources and how its mistakes are named: the `.env` beside the
config, comma-separated list overrides, close-match suggestions, the Telegram Bot API root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.app.config import ConfigError, load_config
from tests.gateway.app.test_cli import iris


def problems(path: Path | None, env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    return info.value.problems


def config_file(tmp_path: Path, text: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_secrets_and_overrides_come_from_the_env_file_beside_the_config(tmp_path: Path) -> None:
    path = config_file(tmp_path, "[telegram]\nenabled = true\n")
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# secrets\nTELEGRAM_BOT_TOKEN=123:from-file\nIRIS_LLM__MAX_TOKENS=100\n"
        'ANTHROPIC_API_KEY="sk file"\n'
    )
    env_file.chmod(0o600)
    config = load_config(path, env={"IRIS_LLM__MAX_TOKENS": "200"})
    assert config.secrets.get("TELEGRAM_BOT_TOKEN") == "123:from-file"
    assert config.secrets.get("ANTHROPIC_API_KEY") == "sk file"
    assert config.settings.llm.max_tokens == 200  # the real environment wins
    assert config.warnings == ()


def test_an_env_file_others_can_read_is_a_warning(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-x\n")
    (tmp_path / ".env").chmod(0o644)
    [warning] = load_config(path, env={}).warnings
    assert "others can read it (mode 644)" in warning and "chmod 600" in warning
    result = iris(tmp_path, "doctor")
    assert result.returncode == 0
    assert result.stderr.startswith("warning: ") and "sk-x" not in result.stderr


def test_list_overrides_accept_json_or_commas(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    for value in ('["telegram:1", "slack:U2"]', "telegram:1,slack:U2", " telegram:1 , slack:U2 "):
        allow = load_config(path, env={"IRIS_AUTH__ALLOW": value}).settings.auth.allow
        assert allow == ("telegram:1", "slack:U2"), value
    assert problems(path, {"IRIS_AUTH__ALLOW": "nocolon"}) == [
        "auth.allow (set by IRIS_AUTH__ALLOW): 'nocolon': ids look like telegram:12345 or "
        "slack:U0123ABCD"
    ]
    # The platforms' own shapes: a typo is refused where it is written, not silently unmatched.
    admins = "auth.admins (set by IRIS_AUTH__ADMINS)"
    assert problems(path, {"IRIS_AUTH__ADMINS": "telegram:abc"}) == [
        f"{admins}: 'telegram:abc': a Telegram user id is a positive number, like telegram:12345"
    ]
    assert problems(path, {"IRIS_AUTH__ADMINS": "slack:u123"}) == [
        f"{admins}: 'slack:u123': a Slack user id is upper case and starts with U or W, like "
        "slack:U0123ABCD"
    ]
    assert problems(path, {"IRIS_AUTH__ADMINS": "telegram:*"}) == [
        f"{admins}: 'telegram:*': an admin is one person, not a wildcard"
    ]
    both = load_config(path, env={"IRIS_AUTH__ALLOW": "telegram:1,telegram:1,telegram:*"})
    assert both.settings.auth.allow == ("telegram:1", "telegram:*")  # the same id once


def test_a_list_override_that_is_not_a_list_never_ends_in_a_traceback(tmp_path: Path) -> None:
    env = {"IRIS_AUTH__ALLOW": "telegram:1"}
    result = iris(tmp_path, "doctor", env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    env = {"IRIS_AUTH": "{not json"}  # a whole section that is not JSON
    result = iris(tmp_path, "doctor", env=env)
    assert "Traceback" not in result.stderr


def test_unknown_keys_suggest_the_closest_known_one(tmp_path: Path) -> None:
    path = config_file(tmp_path, "[telegarm]\nenabled = true\n[proactive]\nquiet_strat = 1\n")
    assert sorted(problems(path, {})) == [
        "proactive.quiet_strat: unknown key (did you mean 'quiet_start'?)",
        "telegarm: unknown key (did you mean 'telegram'?)",
    ]
    assert problems(config_file(tmp_path, "[llm]\nzzz = 1\n"), {}) == ["llm.zzz: unknown key"]
    # Set by a variable, the key is named with it: it is in no file.
    assert problems(config_file(tmp_path), {"IRIS_LLM__MODLE": "x"}) == [
        "llm.modle (set by IRIS_LLM__MODLE): unknown key (did you mean 'model'?)"
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://api.telegram.org",
        "https://api.telegram.org/",
        "api.telegram.org/bot",
        "ftp://x/bot",
    ],
)
def test_a_telegram_base_url_that_is_not_the_bot_api_root_is_one_line(
    tmp_path: Path, url: str
) -> None:
    path = config_file(tmp_path, f'[telegram]\nbase_url = "{url}"\n')
    assert problems(path, {}) == [
        "telegram.base_url: must be the Bot API root ending in /bot, like "
        "https://api.telegram.org/bot"
    ]


def test_the_local_bot_api_server_root_is_fine(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[telegram]\nbase_url = "http://127.0.0.1:8081/bot/"\n')
    assert load_config(path, env={}).settings.telegram.base_url == "http://127.0.0.1:8081/bot"


def test_without_a_config_file_the_env_file_in_the_working_directory_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-cwd\n")
    os.chmod(tmp_path / ".env", 0o600)
    assert load_config(None, env={}).secrets.get("ANTHROPIC_API_KEY") == "sk-cwd"
