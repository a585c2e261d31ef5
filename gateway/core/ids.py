"""What a person's id in config, `iris init` and `/admin allow` must look like: `channel:id`.

The platforms' own shapes are checked where they are known, so a typo is refused where it is
written instead of never matching anyone: a Telegram user id is a positive number, a Slack
user id is upper case and starts with U or W. Other channels (the terminal, test fakes) take
any id without spaces. `channel:*` stands for everyone on a channel where a wildcard is
allowed (`[auth] allow`).
"""

from __future__ import annotations

import re

EXAMPLE = "ids look like telegram:12345 or slack:U0123ABCD"
_SLACK_USER = re.compile(r"[UW][A-Z0-9]+")


def id_problem(entry: str, *, wildcard: bool) -> str | None:
    """Why `entry` is not a person's id (None when it is one)."""
    channel, sep, user = entry.partition(":")
    if not sep or not channel or not user or any(c.isspace() for c in entry):
        return EXAMPLE
    if user == "*":
        return None if wildcard else "an admin is one person, not a wildcard"
    if channel == "telegram" and not (user.isdigit() and int(user) > 0):
        return "a Telegram user id is a positive number, like telegram:12345"
    if channel == "slack" and not _SLACK_USER.fullmatch(user):
        return "a Slack user id is upper case and starts with U or W, like slack:U0123ABCD"
    return None
