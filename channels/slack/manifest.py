"""The Slack app manifest for this channel: `iris slack manifest` prints it.

Pasting it into "Create New App → From an app manifest" gives an app with exactly what the
channel uses: the bot scopes its Web API calls and event subscriptions need, the events
`channel.py` listens to (`message` in DMs, channels, private channels and group DMs, and
`app_mention`), the one slash command, interactivity (buttons are acked by the channel), and
Socket Mode on or off. In http mode events, the command and interactivity all go to
`/slack/events` on the public URL. `tests/channels/slack/test_manifest.py` compares this with
the listeners the channel actually registers with Bolt and the API methods it calls, so the
two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from .channel import EVENTS_PATH

# Event subscription -> the bot scope Slack requires for it.
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
}
# Web API method the channel calls (slack_sdk's name) -> the bot scopes it needs.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth_test": (),
    "chat_postMessage": ("chat:write",),
    "chat_postEphemeral": ("chat:write",),
}
COMMAND_SCOPE = "commands"


def bot_scopes() -> list[str]:
    scopes = {*EVENT_SCOPES.values(), COMMAND_SCOPE}
    for needed in METHOD_SCOPES.values():
        scopes.update(needed)
    return sorted(scopes)


def manifest(*, name: str, command: str, mode: str, url: str = "") -> dict[str, Any]:
    """The manifest as a JSON-ready dict. `url` (the public base URL) is needed in http mode."""
    if mode not in ("socket", "http"):
        raise ValueError(f"mode is socket or http, not {mode!r}")
    if mode == "http" and not url.startswith("https://"):
        raise ValueError("http mode needs the public https:// URL Slack can reach Iris at")
    request_url = url.rstrip("/") + EVENTS_PATH if mode == "http" else None
    slash: dict[str, Any] = {
        "command": command,
        "description": f"Talk to {name}: {command} help lists the commands",
        "usage_hint": "help | clear | compact | status | tz Area/City | admin …",
        "should_escape": False,
    }
    events: dict[str, Any] = {"bot_events": sorted(EVENT_SCOPES)}
    interactivity: dict[str, Any] = {"is_enabled": True}
    if request_url is not None:
        slash["url"] = request_url
        events["request_url"] = request_url
        interactivity["request_url"] = request_url
    return {
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {
            "name": name,
            "description": "A proactive assistant: DM it, mention it, or use " + command,
        },
        "features": {
            "app_home": {
                "home_tab_enabled": False,
                "messages_tab_enabled": True,
                "messages_tab_read_only_enabled": False,
            },
            "bot_user": {"display_name": name, "always_online": True},
            "slash_commands": [slash],
        },
        "oauth_config": {"scopes": {"bot": bot_scopes()}},
        "settings": {
            "event_subscriptions": events,
            "interactivity": interactivity,
            "org_deploy_enabled": False,
            "socket_mode_enabled": mode == "socket",
            "token_rotation_enabled": False,
        },
    }
