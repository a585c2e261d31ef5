"""Config -> channels: which adapters `iris run` builds, and the errors for unusable setups."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.slack import SlackChannel
from channels.telegram import TelegramChannel
from gateway.app.app import App
from gateway.app.channels import build_channels, channel_statuses
from gateway.app.config import Config, Secrets, Settings, load_config
from gateway.core.errors import ConfigError, FatalChannelError
from tests.fakes import FakeLLM


def config(secrets: dict[str, str], **sections: object) -> Config:
    return Config(settings=Settings(**sections), secrets=Secrets(secrets), source=None)  # type: ignore[arg-type]


def test_enabled_channels_are_built_with_their_modes() -> None:
    cfg = config(
        {"TELEGRAM_BOT_TOKEN": "1:abc", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"},
        telegram={"enabled": True},
        slack={"enabled": True, "mode": "http"},
        http={"enabled": True},
    )
    built = build_channels(cfg)
    assert [type(c) for c in built] == [TelegramChannel, SlackChannel]
    assert [c.command_hint("clear") for c in built] == ["/clear", "/iris clear"]
    assert [(s.name, s.enabled, s.reason) for s in channel_statuses(cfg)] == [
        ("telegram", True, "polling mode"),
        ("slack", True, "http mode"),
    ]


def test_nothing_enabled_builds_nothing() -> None:
    assert build_channels(config({})) == []


def test_wrong_kind_of_slack_token_is_fatal() -> None:
    cfg = config(
        {"SLACK_BOT_TOKEN": "xoxp-user", "SLACK_APP_TOKEN": "xapp-1"}, slack={"enabled": True}
    )
    with pytest.raises(FatalChannelError, match="xoxb-"):
        build_channels(cfg)


@pytest.mark.parametrize(
    ("toml", "env", "needle"),
    [
        (
            '[slack]\nenabled = true\nmode = "http"\n',
            {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"},
            "slack.mode: http mode needs [http]",
        ),
        (
            '[telegram]\nenabled = true\nmode = "webhook"\n[http]\nenabled = true\n',
            {"TELEGRAM_BOT_TOKEN": "1:a", "TELEGRAM_WEBHOOK_SECRET": "s"},
            "telegram.webhook_url",
        ),
        ("[telegram]\nenabled = true\n", {}, "TELEGRAM_BOT_TOKEN"),
        (
            '[slack]\nenabled = true\nmode = "socket"\n',
            {"SLACK_BOT_TOKEN": "xoxb-1"},
            "SLACK_APP_TOKEN",
        ),
    ],
)
def test_unusable_channel_config_is_a_config_error(
    tmp_path: Path, toml: str, env: dict[str, str], needle: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env)
    assert any(needle in p for p in caught.value.problems)


async def test_app_refuses_webhook_routes_without_the_http_server(tmp_path: Path) -> None:
    slack = SlackChannel(
        bot_token="xoxb-1", mode="http", signing_secret="s", api_url="http://127.0.0.1:9/api/"
    )
    cfg = config({}, vault={"path": str(tmp_path / "iris.db")})
    with pytest.raises(ConfigError, match="/slack/events"):
        async with App(config=cfg, channels=[slack], llm_override=FakeLLM(), use_llm_override=True):
            pass
