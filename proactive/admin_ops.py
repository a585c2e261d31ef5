"""The proactive engine's side of the admin surface (`gateway.core.admin_ops.ProactiveOps`), and
the `/admin` subcommands built on it: one implementation for chat and for the HTTP API.

Admin actions go through the same store operations and the same engine as everything else:
`execute` moves a pending follow-up to now and runs a tick, so policy (quiet hours, quotas,
consent) and the model's gate still decide; nothing here sends on its own.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

from gateway.core.admin_ops import JSON, NewIntent, NewTrigger
from gateway.core.errors import NotFound, ToolError, UserInputError, WrongState
from gateway.features.contributions import AdminSub
from gateway.turns.commands import CommandCall, parse_item_id, typed_id
from proactive.engine import Engine
from proactive.policy import PolicyConfig, local_day_start_ms, user_prefs
from proactive.tools import MAX_AHEAD_MS, MIN_DELAY_MS, parse_at
from vault.proactive.admin import ProactiveAdminQueries
from vault.proactive.log import ProactiveLog
from vault.proactive.store import ProactiveStore


class ProactiveAdmin:
    def __init__(
        self,
        *,
        store: ProactiveStore,
        plog: ProactiveLog,
        queries: ProactiveAdminQueries,
        engine: Engine | None,
        policy: PolicyConfig,
        default_confidence: float,
    ) -> None:
        self.store = store
        self.plog = plog
        self.queries = queries
        self.engine = engine
        self.policy = policy
        self.default_confidence = default_confidence

    async def _user(self, key: str) -> int:
        pk = await self.queries.user_pk(key)
        if pk is None:
            raise NotFound(f"unknown user {key}")
        return int(pk)

    async def _target(self, user_key: str, chat_key: str) -> tuple[int, int]:
        """The user and chat of an admin's request: both known, and the user writes there
        (a message built from one user's context never goes to somebody else's chat)."""
        user = await self._user(user_key)
        chat = await self.queries.chat_pk(chat_key)
        if chat is None:
            raise NotFound(f"unknown chat {chat_key}")
        if not await self.queries.wrote_in(user, int(chat)):
            raise NotFound(f"{user_key} has never written in {chat_key}")
        return user, int(chat)

    async def register(self, request: NewIntent, *, now_ms: int) -> JSON:
        user, chat = await self._target(request.user, request.chat)
        try:
            at = (
                parse_at(request.at)
                if request.at
                else now_ms + int((request.delay_minutes or 0) * 60_000)
            )
        except ToolError as exc:
            raise UserInputError(str(exc)) from None
        if not now_ms + MIN_DELAY_MS <= at <= now_ms + MAX_AHEAD_MS:
            raise UserInputError("the time must be between one minute and one year ahead")
        confidence = self.default_confidence if request.confidence is None else request.confidence
        intent_id = await self.store.add_intent(
            chat=chat, user=user, what=request.what.strip(), why=request.why.strip(),
            confidence=confidence, kind=request.kind,
            exact_time=request.kind == "user_reminder" and request.at is not None,
            execute_at=at, now_ms=now_ms,
        )  # fmt: skip
        if self.engine is not None:
            self.engine.wake()
        return {"id": intent_id, "status": "pending", "execute_at": at}

    async def trigger(self, request: NewTrigger, *, now_ms: int) -> JSON:
        user, chat = await self._target(request.user, request.chat)
        key = f"key:{request.key}" if request.key else f"auto:{uuid.uuid4().hex}"
        seen = await self.queries.trigger_by_key(user, "external", key)
        if seen is not None:  # a retry of the same event: the answer it got the first time
            return {"id": seen[0], "type": "external", "status": seen[1], "duplicate": True}
        at = now_ms + int(request.delay_minutes * 60_000)
        trigger_id = await self.store.add_trigger(
            type="external", chat=chat, user=user, context=request.context,
            source_key=key, execute_at=at, now_ms=now_ms,
        )  # fmt: skip
        if trigger_id is None:
            raise WrongState(f"{request.user} already has an external trigger pending")
        if self.engine is not None:
            self.engine.wake()
        return {"id": trigger_id, "type": "external", "status": "pending", "execute_at": at}

    async def _pending_intent(self, item_id: int) -> Any:
        item = await self.store.get("intent", item_id)
        if item is None:
            raise NotFound(f"no follow-up #{item_id}")
        if item.status != "pending":
            raise WrongState(f"follow-up #{item_id} is {item.status}, not pending")
        return item

    async def cancel(self, item_id: int, *, now_ms: int) -> JSON:
        item = await self._pending_intent(item_id)
        if not await self.store.cancel_intent(item.user_pk, item_id, now_ms):
            raise WrongState(f"follow-up #{item_id} is no longer pending")
        return {"id": item_id, "status": "cancelled"}

    async def pending(self, user: str | None) -> JSON:
        user_pk = await self._user(user) if user is not None else None
        return await self.queries.pending(user_pk)

    async def quota(self, user: str, *, now_ms: int) -> JSON:
        user_pk = await self._user(user)
        zone = user_prefs(await self.queries.user_timezone(user_pk), {}, self.policy).zone
        used = await self.plog.sends_since(user=user_pk, since_ms=local_day_start_ms(now_ms, zone))
        rate = await self.plog.engagement_rate(user_pk, now_ms)
        return {"user": user, "used_today": used, "max_per_day": self.policy.per_user_daily,
                "remaining": max(0, self.policy.per_user_daily - used), "timezone": zone.key,
                "engagement_rate_30d": rate}  # fmt: skip

    async def scan(self) -> JSON:
        if self.engine is None:
            raise WrongState("the proactive engine is off ([proactive] enabled = false)")
        return asdict(await self.engine.scan())

    async def execute(self, item_id: int, *, now_ms: int) -> JSON:
        """Make the follow-up due now and wake the engine; its next tick runs it.

        Not run here: the caller may hold the chat's lock (an admin firing a follow-up of their
        own chat), which the engine's execution takes too.
        """
        if self.engine is None:
            raise WrongState("the proactive engine is off ([proactive] enabled = false)")
        await self._pending_intent(item_id)
        if not await self.store.fire_now(item_id, now_ms):
            raise WrongState(f"follow-up #{item_id} is no longer pending")
        self.engine.wake()
        return {"id": item_id, "status": "due", "execute_at": now_ms}

    def subs(self) -> list[AdminSub]:
        return [
            AdminSub("intents", "[user]", "pending follow-ups (all users or one)", self._intents),
            AdminSub("triggers", "", "pending passive triggers", self._triggers),
            AdminSub("cancel", "ID", "cancel a pending follow-up", self._cancel),
            AdminSub("fire", "ID", "run a follow-up now (policy and gate still apply)", self._fire),
            AdminSub("scan", "", "run the passive scan now", self._scan),
            AdminSub("quota", "[user]", "a user's proactive quota (default: you)", self._quota),
        ]

    async def _intents(self, call: CommandCall, args: str) -> str:
        found = await self.pending(args or None)
        return _listing("Pending follow-ups", found["intents"])

    async def _triggers(self, call: CommandCall, args: str) -> str:
        return _listing("Pending triggers", (await self.pending(None))["triggers"])

    async def _cancel(self, call: CommandCall, args: str) -> str:
        await self.cancel(_id(args, call, "cancel"), now_ms=call.scope.now_ms)
        return f"Cancelled follow-up #{args.strip().lstrip('#')}."

    async def _fire(self, call: CommandCall, args: str) -> str:
        result = await self.execute(_id(args, call, "fire"), now_ms=call.scope.now_ms)
        return (
            f"Follow-up #{result['id']} runs now; quiet hours, quota and the gate still "
            "decide (see /admin intents)."
        )

    async def _scan(self, call: CommandCall, args: str) -> str:
        found = await self.scan()
        return "Scan done: " + ", ".join(f"{k} {v}" for k, v in found.items())

    async def _quota(self, call: CommandCall, args: str) -> str:
        user = args.strip() or call.scope.user.key
        q = await self.quota(user, now_ms=call.scope.now_ms)
        rate = q["engagement_rate_30d"]
        return (
            f"{user}: {q['remaining']}/{q['max_per_day']} proactive messages left today "
            f"({q['timezone']}); engagement {'n/a' if rate is None else f'{rate:.0%}'}."
        )


def _id(args: str, call: CommandCall, sub: str) -> int:
    item_id = parse_item_id(args, f"Usage: {call.hint('admin')} {sub} ID")
    if item_id is None:
        raise NotFound(f"no follow-up #{typed_id(args)}")
    return item_id


def _listing(title: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"{title}: none."
    lines = [f"{title}:"]
    for r in rows:
        lines.append(f"• #{r['id']} {r['user']} {r['kind']} [{r['status']}]: {r['what'][:80]}")
    return "\n".join(lines)
