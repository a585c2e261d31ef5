"""The `[telegram]` and `[slack]` sections: how each channel reaches its platform.

Checked where the value is read, so a wrong one is a one-line error at start rather than a
failure on the first call (a Bot API root without `/bot`, a Web API root that is not a URL, a
slash command Slack's manifest would refuse).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator

from gateway.features.settings import Section


class TelegramSection(Section):
    enabled: bool = False
    mode: Literal["polling", "webhook"] = "polling"
    base_url: str = "https://api.telegram.org/bot"
    webhook_url: str = ""
    webhook_path: str = "/telegram/webhook"

    @field_validator("base_url")
    @classmethod
    def _bot_api_root(cls, value: str) -> str:
        # python-telegram-bot appends the token to this string: without the /bot suffix every
        # call would go to a wrong URL and fail as an invalid token, over and over.
        if not value.startswith(("https://", "http://")) or not value.rstrip("/").endswith("/bot"):
            raise ValueError(
                "must be the Bot API root ending in /bot, like https://api.telegram.org/bot"
            )
        return value.rstrip("/")


_SLASH_COMMAND = re.compile(r"/[^\sA-Z/]{1,31}")


class SlackSection(Section):
    enabled: bool = False
    mode: Literal["socket", "http"] = "socket"
    api_url: str = "https://slack.com/api/"
    command: str = "/iris"

    @field_validator("api_url")
    @classmethod
    def _web_api_root(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be the Web API root, like https://slack.com/api/")
        return value if value.endswith("/") else value + "/"

    @field_validator("command")
    @classmethod
    def _slash_command(cls, value: str) -> str:
        # Slack's rule for a command name (the manifest with any other is refused there).
        if not _SLASH_COMMAND.fullmatch(value):
            raise ValueError(
                "must be a slash command: '/' then up to 31 lowercase letters, digits, - or _, "
                "like /iris"
            )
        return value
