"""Who may talk to Iris, decided by the gateway from platform user ids — never by the model.

Deny by default. Two sources say who is in:

- `config.toml` (`[auth] admins` and `[auth] allow`, entries `channel:id` or `channel:*`): the
  operator's word. It wins on every conflict: a chat decision never removes someone the file
  lets in (`/admin deny` refuses them and names the file), and a chat deny stored earlier
  stops counting as soon as the file lists the user.
- Decisions admins made in chat (`/admin allow CODE|channel:id`, `/admin deny …`), kept in the
  vault (`vault/pairing.py`) and loaded here at start; `grant`/`revoke` apply a new decision at
  once, for the next message.

The local terminal user is always allowed and is an admin. In groups Iris only answers when it
is addressed (mentioned or replied to); non-allowed users in groups get silence, in DMs at most
one short notice a day carrying a pairing code (the auth step rate-limits it through the
vault). Someone an admin denied gets silence everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Protocol

from gateway.core.messages import ChatKind, Inbound, UserRef
from vault.pairing import Access, Grant

LOCAL_CHANNEL = "console"


class Decision(Enum):
    ALLOW = "allow"
    IGNORE = "ignore"  # not addressed to us (group chatter): do nothing
    DENY_NOTICE = "deny_notice"  # not allowed, in a DM: tell them how to get access
    DENY_SILENT = "deny_silent"  # not allowed, in a group, or denied by an admin: say nothing


OWN_KEPT = 1000  # this process's latest decisions kept for replay (admins decide rarely)


class Authorizer:
    def __init__(
        self,
        *,
        admins: Iterable[str],
        allow: Iterable[str],
        granted: Iterable[str] = (),
        denied: Iterable[str] = (),
        pairing: bool = True,
    ) -> None:
        # Strangers' notices carry a pairing code (`[auth] pairing`).
        self.pairing = pairing
        self._admins = frozenset(admins)
        self._allow = frozenset(allow)
        self._granted = set(granted)
        self._denied = set(denied)
        # Decisions made here, numbered: a reload replays those its read may predate.
        self._own: list[tuple[int, str, bool]] = []
        self._seq = 0

    def is_admin(self, user: UserRef) -> bool:
        return user.channel == LOCAL_CHANNEL or user.key in self._admins

    def configured(self, user: UserRef) -> str | None:
        """Why `config.toml` lets this user in (the entry that does), or None."""
        if user.channel == LOCAL_CHANNEL:
            return "the local terminal"
        if user.key in self._admins:
            return f"[auth] admins has {user.key}"
        for entry in (user.key, f"{user.channel}:*"):
            if entry in self._allow:
                return f"[auth] allow has {entry}"
        return None

    def is_allowed(self, user: UserRef) -> bool:
        return self.configured(user) is not None or user.key in self._granted

    def is_denied(self, user: UserRef) -> bool:
        """Denied in chat and not let in by the file (the file wins)."""
        return user.key in self._denied and self.configured(user) is None

    def mark(self) -> int:
        """Taken before reading the vault's decisions: `use(…, since=mark)` keeps this
        process's own decisions made meanwhile (the read may predate them)."""
        return self._seq

    def use(self, grants: Iterable[Grant], *, since: int | None = None) -> None:
        """The decisions admins made in chat, as the vault has them now (another process, an
        `iris chat` or a replica, may have made some), then this process's own made since
        `since` (a `mark()`), which the read may have missed."""
        decided = list(grants)
        self._granted = {g.key for g in decided if g.access is Access.ALLOW}
        self._denied = {g.key for g in decided if g.access is Access.DENY}
        start = self._seq if since is None else since
        for seq, key, allowed in self._own:
            if seq >= start:
                self._apply(key, allowed)

    def grant(self, key: str) -> None:
        self._decided(key, True)

    def revoke(self, key: str) -> None:
        self._decided(key, False)

    def _decided(self, key: str, allowed: bool) -> None:
        self._own.append((self._seq, key, allowed))
        self._seq += 1
        del self._own[:-OWN_KEPT]
        self._apply(key, allowed)

    def _apply(self, key: str, allowed: bool) -> None:
        (self._denied if allowed else self._granted).discard(key)
        (self._granted if allowed else self._denied).add(key)

    def access_of(self, user: UserRef) -> str:
        """One word for `/admin users`: config, granted, denied or none."""
        if self.configured(user) is not None:
            return "config"
        if user.key in self._granted:
            return "granted in chat"
        return "denied" if user.key in self._denied else "not allowed"

    def decide(self, inbound: Inbound) -> Decision:
        if inbound.kind is ChatKind.GROUP and not (inbound.mentioned or inbound.reply_to_bot):
            return Decision.IGNORE
        if self.is_allowed(inbound.user):
            return Decision.ALLOW
        if inbound.kind is ChatKind.GROUP or self.is_denied(inbound.user):
            return Decision.DENY_SILENT
        return Decision.DENY_NOTICE


class AuthLists(Protocol):
    """What `[auth]` in config.toml says (the app's `AuthSection`)."""

    @property
    def admins(self) -> tuple[str, ...]: ...
    @property
    def allow(self) -> tuple[str, ...]: ...
    @property
    def pairing(self) -> bool: ...


def authorizer_from(lists: AuthLists, grants: Iterable[Grant]) -> Authorizer:
    """The file's lists plus the decisions admins made in chat (read from the vault)."""
    decided = list(grants)
    return Authorizer(
        admins=lists.admins,
        allow=lists.allow,
        granted=[g.key for g in decided if g.access is Access.ALLOW],
        denied=[g.key for g in decided if g.access is Access.DENY],
        pairing=lists.pairing,
    )
