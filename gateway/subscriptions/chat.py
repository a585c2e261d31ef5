"""`/admin subscribe` in chat: list, create and delete this chat's subscriptions.

A subscription made in a chat is owned by that chat and only ever hears it. In a private chat
it may deliver to a webhook (the secret is shown once, there); in a group, where everyone reads
the answer, only `poll` and `sse` subscriptions can be made — a secret is never posted to a
group. The same operations as the HTTP API (`api.py`), so both validate alike.
"""

from __future__ import annotations

from pydantic import ValidationError

from gateway.core.errors import UserInputError
from gateway.features.contributions import AdminSub
from gateway.subscriptions.api import SubscriptionOps
from gateway.subscriptions.schema import SubscriptionRequest
from gateway.turns.commands import CommandCall

KINDS = "<topic|entity|document>"
USAGE = (
    f"list | add {KINDS} <pattern> | webhook <url> {KINDS} <pattern> | delete <id> "
    "| enable <id> | disable <id>"
)


# Errors whose pydantic text is a regular expression, in words.
_PLAIN = {
    ("url", "string_pattern_mismatch"): (
        "must be an http:// or https:// URL: a host name, an optional port of up to 5 digits, "
        "then a path"
    ),
}


class SubscribeCommand:
    def __init__(self, ops: SubscriptionOps) -> None:
        self.ops = ops

    def admin_sub(self) -> AdminSub:
        return AdminSub(
            "subscribe", USAGE, "context subscriptions of this chat (poll, sse or webhook)",
            self.handle,
        )  # fmt: skip

    async def handle(self, call: CommandCall, args: str) -> str:
        verb, _, rest = args.strip().partition(" ")
        owner = call.scope.chat.key
        usage = f"Usage: {call.hint('admin')} subscribe {USAGE}"
        if verb in ("", "list"):
            return _render((await self.ops.listing(owner=owner))["subscriptions"])
        if verb == "delete" and rest.strip():
            await self.ops.delete(rest.strip(), owner=owner)
            return f"Subscription {rest.strip()} deleted."
        if verb in ("enable", "disable") and rest.strip():
            sub_id = rest.strip()
            enable = verb == "enable"
            await self.ops.set_enabled(sub_id, enable, owner=owner, actor=call.scope.user.key)
            return f"Subscription {sub_id} {verb}d."
        if verb == "add":
            return await self._create(call, rest, url=None, usage=usage)
        if verb == "webhook":
            url, _, more = rest.strip().partition(" ")
            if call.scope.in_group:
                raise UserInputError(
                    "A webhook's secret is shown once: make it in a private chat, or use add."
                )
            return await self._create(call, more, url=url, usage=usage)
        raise UserInputError(usage)

    async def _create(self, call: CommandCall, rest: str, *, url: str | None, usage: str) -> str:
        kind, _, pattern = rest.strip().partition(" ")
        if kind not in ("topic", "entity", "document") or not pattern.strip():
            raise UserInputError(usage)
        body: dict[str, object] = {
            "patterns": [{"type": kind, "pattern": pattern.strip()}],
            "callback": "webhook" if url is not None else "poll",
        }
        if url is not None:
            body["url"] = url
        try:
            request = SubscriptionRequest.model_validate(body, strict=True)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"][1:] or first["loc"])
            said = _PLAIN.get((where, first["type"]), first["msg"])
            raise UserInputError(f"Not a valid subscription: {where}: {said}") from None
        created = await self.ops.create(request, owner=call.scope.chat.key)
        lines = [f"Subscription {created['id']} created ({body['callback']})."]
        if "secret" in created:
            lines.append(f"Webhook secret (shown once): {created['secret']}")
        return "\n".join(lines)


def _render(subs: list[dict[str, object]]) -> str:
    if not subs:
        return "No subscriptions in this chat."
    lines = []
    for s in subs:
        patterns = ", ".join(f"{p['type']} {p['pattern']}" for p in s["patterns"])  # type: ignore[attr-defined]
        state = "on" if s["enabled"] else f"off ({s['disabled_reason']})"
        last = s["last_triggered_at"] or "never"
        lines.append(f"• {s['id']} [{s['callback']}, {state}] {patterns}; last triggered {last}")
    return "\n".join(lines)
