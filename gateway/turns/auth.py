"""Who may talk to Iris, decided by the gateway from platform user ids — never by the model.

Deny by default: only users listed in `[auth] allow` (or `channel:*`) and admins are served.
The local terminal user is always allowed and is an admin. In groups Iris only answers when it
is addressed (mentioned or replied to); non-allowed users in groups get silence, in DMs at most
one short notice a day (the router rate-limits it through the vault).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from gateway.core.messages import ChatKind, Inbound, UserRef

LOCAL_CHANNEL = "console"


class Decision(Enum):
    ALLOW = "allow"
    IGNORE = "ignore"  # not addressed to us (group chatter): do nothing
    DENY_NOTICE = "deny_notice"  # not allowed, in a DM: tell them how to get access
    DENY_SILENT = "deny_silent"  # not allowed, in a group: say nothing


class Authorizer:
    def __init__(self, *, admins: Iterable[str], allow: Iterable[str]) -> None:
        self._admins = frozenset(admins)
        self._allow = frozenset(allow)

    def is_admin(self, user: UserRef) -> bool:
        return user.channel == LOCAL_CHANNEL or user.key in self._admins

    def is_allowed(self, user: UserRef) -> bool:
        return self.is_admin(user) or user.key in self._allow or f"{user.channel}:*" in self._allow

    def decide(self, inbound: Inbound) -> Decision:
        if inbound.kind is ChatKind.GROUP and not (inbound.mentioned or inbound.reply_to_bot):
            return Decision.IGNORE
        if self.is_allowed(inbound.user):
            return Decision.ALLOW
        return Decision.DENY_SILENT if inbound.kind is ChatKind.GROUP else Decision.DENY_NOTICE
