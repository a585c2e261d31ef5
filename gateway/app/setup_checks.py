"""Validators for `iris init`'s answers: each returns a message for a bad answer, None for a
good one. The message is what the person reads (after the flag's name when non-interactive),
so it says what a good answer looks like."""

from __future__ import annotations

import re
from collections.abc import Callable

from gateway.core.clock import check_timezone
from gateway.core.ids import id_problem

CHANNELS = ("telegram", "slack")


def telegram_token(value: str) -> str | None:
    if re.fullmatch(r"\d+:[A-Za-z0-9_-]+", value):
        return None
    return "a bot token looks like 123456789:AA… (ask @BotFather for /token)"


def prefixed(prefix: str, what: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value.startswith(prefix) else f"{what} starts with {prefix}"

    return check


def present(value: str) -> str | None:
    return None if value and not any(c.isspace() for c in value) else "cannot be empty"


def optional_key(value: str) -> str | None:
    return "a key has no spaces" if any(c.isspace() for c in value) else None


def https(value: str) -> str | None:
    return None if value.startswith("https://") else "must be a public https:// URL"


def timezone(value: str) -> str | None:
    try:
        check_timezone(value)
    except ValueError:
        return f"unknown time zone '{value[:64]}' (IANA names like Europe/Berlin or UTC)"
    return None


def ids(wildcards: bool) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        for entry in split(value):
            problem = id_problem(entry, wildcard=wildcards)
            if problem is not None:
                return f"'{entry[:60]}': {problem}"
        return None

    return check


def split(value: str) -> list[str]:
    if value.strip().lower() == "none":
        return []
    return list(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))


def channel_list(value: str) -> str | None:
    unknown = [c for c in split(value.replace("both", "telegram,slack")) if c not in CHANNELS]
    return f"unknown channel {unknown[0]!r} (telegram, slack, both or none)" if unknown else None


def choice(*options: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in options else f"one of: {', '.join(options)}"

    return check
