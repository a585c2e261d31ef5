"""Path rules: globs, document types by path, scopes, and refresh policies.

A glob is matched against a document's path relative to the config file's folder, with `*`
inside one folder and `**/` across any number of them (Python 3.11's `PurePath.match` has no
`**`). Scopes: a document matched by a `[context.scopes]` glob carries that glob as its scope
and is visible only in the chats it lists, and in DMs with the users it lists — never in a group
because of a user entry, since everyone there reads the replies. The refresh policy of a
document follows from its type and status (S4's defaults).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum

from gateway.core.scope import Scope


class Policy(StrEnum):
    SESSION_START = "session_start"  # given once per session, at the version it had then
    ON_CHANGE = "on_change"  # refreshed when its content changes (cooldown permitting)
    ON_REQUEST = "on_request"  # refreshed only after /context refresh


def compile_glob(glob: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def policy_of(doc_type: str, status: str) -> Policy:
    if status == "superseded":
        return Policy.ON_REQUEST
    if doc_type == "adr":
        return Policy.SESSION_START
    if doc_type == "rfc" and status == "implemented":
        return Policy.ON_REQUEST
    return Policy.ON_CHANGE


def is_stable(policy: Policy) -> bool:
    """Documents whose text cannot change during a session without a request go into the
    cacheable system prefix."""
    return policy is not Policy.ON_CHANGE


class PathRules:
    def __init__(self, types: Mapping[str, str], scopes: Mapping[str, tuple[str, ...]]) -> None:
        self._types = [(compile_glob(g), t) for g, t in types.items()]
        self._scopes = [(g, compile_glob(g), frozenset(entries)) for g, entries in scopes.items()]

    def type_for(self, path: str) -> str | None:
        return next((t for pattern, t in self._types if pattern.match(path)), None)

    def scope_for(self, path: str) -> str | None:
        """The first scope glob matching `path`; None: visible in every allowed chat."""
        return next((g for g, pattern, _ in self._scopes if pattern.match(path)), None)

    def visible(self, scope: Scope) -> frozenset[str]:
        """The scope globs whose documents this chat may see."""
        chat = f"chat:{scope.chat.channel}:{scope.chat.chat_id}"
        user = f"user:{scope.user.channel}:{scope.user.user_id}"
        return frozenset(
            glob
            for glob, _, entries in self._scopes
            if chat in entries or (user in entries and not scope.in_group)
        )
