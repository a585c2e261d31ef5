"""`/admin allow` and `/admin deny`: letting people in (or keeping them out) from chat.

An admin answers a stranger's pairing code (`/admin allow K7QH2M`) or names a platform id
(`/admin allow telegram:12345`, `/admin deny slack:U0123`). The decision is stored in the vault
(`vault/pairing.py`) and applied to the running authorizer at once — no restart, no config
edit — and audited like every admin action (`gateway/admin/chat.py` records the outcome).

`config.toml` wins on conflicts (see `gateway/turns/auth.py`): denying someone the file lets in
is refused with the entry that does, so no chat decision silently does nothing.
"""

from __future__ import annotations

from gateway.core.errors import UserInputError
from gateway.core.ids import id_problem
from gateway.core.messages import UserRef
from gateway.core.ports import Clock
from gateway.features.contributions import AdminSub
from gateway.turns.auth import Authorizer
from gateway.turns.commands import CommandCall
from vault.pairing import Access, AccessStore, looks_like_code, normalize_code

USAGE = "CODE | channel:id"


def _ref(text: str) -> UserRef | None:
    channel, sep, user_id = text.partition(":")
    if not sep:
        return None
    if user_id == "*":
        raise UserInputError(
            'Wildcards are for config.toml ([auth] allow = ["telegram:*"]), not for chat.'
        )
    problem = id_problem(text, wildcard=False)
    if problem is not None:
        raise UserInputError(f"'{text[:60]}' is not an id: {problem}.")
    return UserRef(channel=channel, user_id=user_id)


class AccessCommands:
    def __init__(self, *, store: AccessStore, authorizer: Authorizer, clock: Clock) -> None:
        self.store = store
        self.authorizer = authorizer
        self.clock = clock

    def subs(self) -> list[AdminSub]:
        return [
            AdminSub(
                "allow", USAGE, "let someone in now (their pairing code, or an id)", self.allow
            ),
            AdminSub("deny", USAGE, "keep someone out (and stop their notices)", self.deny),
        ]

    async def _target(self, args: str) -> tuple[UserRef, str]:
        """The user `args` names, and how to say who they are."""
        text = args.strip()
        if not text:
            raise UserInputError(f"Say who: a pairing code or an id ({USAGE}).")
        ref = _ref(text)
        if ref is not None:
            return ref, ref.key
        if not looks_like_code(text):
            raise UserInputError(
                f"'{text}' is neither a pairing code (six letters and digits, like K7QH2M) nor "
                "an id like telegram:12345."
            )
        found = await self.store.find_code(text, self.clock.now_ms())
        if found is None:
            raise UserInputError(
                f"No open pairing code {normalize_code(text)}: it was used, or it expired. "
                "When they write to Iris again they get a new one."
            )
        ref = UserRef(channel=found.channel, user_id=found.user_id)
        name = f" ({found.display_name})" if found.display_name else ""
        return ref, f"{ref.key}{name}"

    async def allow(self, call: CommandCall, args: str) -> str:
        user, who = await self._target(args)
        reason = self.authorizer.configured(user)
        if reason is not None:
            return f"{who} is already let in by config.toml ({reason}); nothing to store."
        await self._decide(call, user, Access.ALLOW)
        self.authorizer.grant(user.key)
        return f"Allowed {who}: they can talk to Iris now."

    async def deny(self, call: CommandCall, args: str) -> str:
        user, who = await self._target(args)
        reason = self.authorizer.configured(user)
        if reason is not None:
            raise UserInputError(
                f"{who} is let in by config.toml ({reason}), which wins over chat: remove the "
                "entry there and restart Iris."
            )
        await self._decide(call, user, Access.DENY)
        self.authorizer.revoke(user.key)
        return (
            f"Denied {who}: Iris ignores them from now on, without notices. "
            f"{call.hint('admin')} allow {user.key} undoes it."
        )

    async def _decide(self, call: CommandCall, user: UserRef, access: Access) -> None:
        await self.store.decide(
            user.channel,
            user.user_id,
            access,
            actor=call.scope.user.key,
            now_ms=self.clock.now_ms(),
        )

    async def users_lines(self, seen: set[str]) -> list[str]:
        """For `/admin users`: decisions about people not listed yet, and open codes."""
        lines = []
        unseen = [g for g in await self.store.grants() if g.key not in seen]
        if unseen:
            lines += ["", "Decided in chat, not seen yet:"]
            lines += [f"• {g.key} — {g.access} (by {g.actor})" for g in unseen]
        pending = await self.store.pending(self.clock.now_ms())
        if pending:
            lines += ["", "Waiting for an admin (pairing codes):"]
            lines += [
                f"• {p.code} — {p.key}" + (f" ({p.display_name})" if p.display_name else "")
                for p in pending
            ]
        return lines
