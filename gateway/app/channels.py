"""Part of the composition root: which platform channels run, built from config.

Split from `gateway/app/app.py` to keep that module readable; like it, this module may import
the concrete channels (lazily, so `iris chat` and `iris doctor` never load platform SDKs).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.app.config import Config
from gateway.core.errors import ChannelUnavailable, FatalChannelError
from gateway.core.ports import Channel, ChecksCredentials
from gateway.turns.delivery import RESEND_CONCURRENCY


@dataclass(frozen=True, slots=True)
class ChannelStatus:
    name: str
    enabled: bool
    reason: str


def channel_statuses(config: Config) -> list[ChannelStatus]:
    """Which platform channels `iris run` starts, and why the others are off."""
    s = config.settings
    return [
        ChannelStatus(
            "telegram",
            s.telegram.enabled,
            f"{s.telegram.mode} mode"
            if s.telegram.enabled
            else "not enabled ([telegram] enabled = false)",
        ),
        ChannelStatus(
            "slack",
            s.slack.enabled,
            f"{s.slack.mode} mode" if s.slack.enabled else "not enabled ([slack] enabled = false)",
        ),
    ]


def build_channels(config: Config) -> list[Channel]:
    """The enabled platform channels. Raises FatalChannelError for unusable credentials."""
    s, secrets = config.settings, config.secrets
    channels: list[Channel] = []
    # Imported here so `iris chat` and `iris doctor` never load the platform SDKs.
    if s.telegram.enabled:
        from channels.telegram import TelegramChannel

        channels.append(
            TelegramChannel(
                token=secrets.get("TELEGRAM_BOT_TOKEN") or "",
                base_url=s.telegram.base_url,
                mode=s.telegram.mode,
                webhook_url=s.telegram.webhook_url,
                webhook_path=s.telegram.webhook_path,
                webhook_secret=secrets.get("TELEGRAM_WEBHOOK_SECRET"),
                # A connection for every send that can run at once: each turn, each resend.
                send_connections=s.router.max_concurrency + RESEND_CONCURRENCY,
            )
        )
    if s.slack.enabled:
        from channels.slack import SlackChannel

        channels.append(
            SlackChannel(
                bot_token=secrets.get("SLACK_BOT_TOKEN") or "",
                mode=s.slack.mode,
                app_token=secrets.get("SLACK_APP_TOKEN"),
                signing_secret=secrets.get("SLACK_SIGNING_SECRET"),
                api_url=s.slack.api_url,
                command=s.slack.command,
            )
        )
    return channels


async def check_channels_online(config: Config) -> list[tuple[str, bool, str]]:
    """(channel, ok, what the platform said) for every enabled channel: `iris doctor --online`."""
    try:
        channels = build_channels(config)
    except FatalChannelError as exc:
        return [("channels", False, str(exc))]
    results = []
    for channel in channels:
        if not isinstance(channel, ChecksCredentials):
            continue
        async with channel:
            try:
                results.append((channel.name, True, await channel.check_credentials()))
            except (FatalChannelError, ChannelUnavailable) as exc:
                results.append((channel.name, False, str(exc)))
    return results
