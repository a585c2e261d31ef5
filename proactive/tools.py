"""The model's proactive tools, scoped by the gateway to the current chat and user.

`proactive_intent` registers a follow-up (or a reminder the user asked for) for *this* chat;
`proactive_cancel`, `proactive_list`, `proactive_quota` and `proactive_engage` act on the
current user's rows only — the model never passes a user id, so no conversation can touch
someone else's follow-ups. In a group chat the listing shows only what belongs to that chat
(the rest is between the user and Iris). Admin chats also get `proactive_scan` and
`proactive_execute`. Every tool but the admin ones is also offered to the proactive gate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from gateway.agent.tools import Tool
from gateway.core.errors import ToolError
from gateway.core.scope import Scope
from proactive.policy import PolicyConfig, local, local_day_start_ms, user_prefs
from vault.proactive.log import ENGAGEMENT_WINDOW_MS, Overview, ProactiveLog
from vault.proactive.scan import ScanResult
from vault.proactive.store import ProactiveStore

MAX_AHEAD_MS = 365 * 86_400_000
MIN_DELAY_MS = 60_000


class IntentArgs(BaseModel):
    what: str = Field(min_length=1, max_length=500, description="what to follow up on")
    why: str = Field("", max_length=500, description="why it matters to the user")
    delay_minutes: float | None = Field(None, gt=0, description="minutes from now")
    at: str | None = Field(
        None, description="exact time, ISO 8601 with a UTC offset (2026-05-01T09:00:00+02:00)"
    )
    confidence: float | None = Field(None, ge=0, le=1, description="how useful (0..1)")
    kind: Literal["ai", "user_reminder"] = Field(
        "ai", description="user_reminder when the user asked to be reminded"
    )

    @model_validator(mode="after")
    def _one_time(self) -> IntentArgs:
        if (self.delay_minutes is None) == (self.at is None):
            raise ValueError("give exactly one of delay_minutes or at")
        return self


class IdArgs(BaseModel):
    id: int = Field(ge=1, le=2**63 - 1)  # beyond SQLite's integers no row has it


class NoArgs(BaseModel):
    pass


def parse_at(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError("at: not an ISO 8601 time (use 2026-05-01T09:00:00+02:00)") from None
    if when.tzinfo is None:
        raise ToolError("at: the time needs a UTC offset, e.g. +02:00 or Z")
    return int(when.timestamp() * 1000)


class ProactiveTools:
    def __init__(
        self,
        *,
        store: ProactiveStore,
        plog: ProactiveLog,
        policy: PolicyConfig,
        default_confidence: float,
        wake: Callable[[], None] = lambda: None,
        scan: Callable[[], Awaitable[ScanResult]] | None = None,
        settings_of: Callable[[Scope], Awaitable[Mapping[str, object]]] | None = None,
    ) -> None:
        self.store = store
        self.plog = plog
        self.policy = policy
        self.default_confidence = default_confidence
        self.wake = wake
        self.scan_fn = scan
        self.settings_of = settings_of  # the user's settings (`proactive_enabled`)

    def tools(self) -> list[Tool]:
        tools = [
            Tool("proactive_intent", "Schedule a follow-up message to this user (or a reminder "
                 "they asked for).", IntentArgs, self.intent, proactive=True),
            Tool("proactive_cancel", "Cancel one of this user's pending follow-ups by id.",
                 IdArgs, self.cancel, proactive=True),
            Tool("proactive_list", "List this user's pending follow-ups, pending check-ins and "
                 "recent proactive messages (with the ids the other tools take).", NoArgs,
                 self.listing, proactive=True),
            Tool("proactive_quota", "Proactive quota left today and engagement rate.", NoArgs,
                 self.quota, proactive=True),
            Tool("proactive_engage", "Record that the user responded to one of your proactive "
                 "messages (id from proactive_list or /why) somewhere the automatic rule does "
                 "not see: it only counts a message in the same chat within 24 h.", IdArgs,
                 self.engage, proactive=True),
            Tool("proactive_execute", "Admin: run a pending follow-up at the next tick.", IdArgs,
                 self.execute, admin_only=True),
        ]  # fmt: skip
        if self.scan_fn is not None:
            tools.append(
                Tool("proactive_scan", "Admin: run the passive scan now.", NoArgs, self.scan,
                     admin_only=True)
            )  # fmt: skip
        return tools

    async def intent(self, scope: Scope, args: IntentArgs) -> str:
        now = scope.now_ms
        if args.at is not None:
            at = parse_at(args.at)
        else:
            assert args.delay_minutes is not None
            if not args.delay_minutes * 60_000 <= MAX_AHEAD_MS:  # also infinity, before int()
                raise ToolError("the time must be within a year")
            at = now + int(args.delay_minutes * 60_000)
        if at < now + MIN_DELAY_MS:
            raise ToolError("the time must be at least one minute in the future")
        if at > now + MAX_AHEAD_MS:
            raise ToolError("the time must be within a year")
        what = args.what.strip()
        # A user who retries after a failed turn replays the model's tool calls: the same
        # follow-up must not be registered (and later sent) twice.
        for pending in await self.store.pending_intents(scope.user_pk):
            if (
                pending.chat_pk == scope.chat_pk
                and pending.what == what
                and pending.kind == args.kind
            ):
                return f"Already registered as #{pending.id}; nothing added."
        confidence = self.default_confidence if args.confidence is None else args.confidence
        intent_id = await self.store.add_intent(
            chat=scope.chat_pk, user=scope.user_pk, what=what, why=args.why.strip(),
            confidence=confidence, kind=args.kind,
            exact_time=args.kind == "user_reminder" and args.at is not None,
            execute_at=at, now_ms=now,
        )  # fmt: skip
        self.wake()
        zone = user_prefs(scope.timezone, {}, self.policy).zone
        if args.kind == "ai":
            note = "The gate, quiet hours and the quota are checked when it is due."
        elif args.at is not None:
            note = "A reminder at an explicit time: sent then, even within quiet hours."
        else:
            note = ("A reminder: the quota never holds it back (it counts toward it); moved "
                    "out of quiet hours if needed.")  # fmt: skip
        said = f"Registered #{intent_id} for {local(at, zone):%Y-%m-%d %H:%M} ({zone.key}). {note}"
        settings = await self.settings_of(scope) if self.settings_of is not None else {}
        if not user_prefs(scope.timezone, dict(settings), self.policy).enabled:
            said += (
                " But this user turned proactive messages off (/proactive off): it will not be "
                "sent unless they turn them back on (/proactive on). Tell them so."
            )
        return said

    async def cancel(self, scope: Scope, args: IdArgs) -> str:
        if not await self.store.cancel_intent(scope.user_pk, args.id, scope.now_ms):
            raise ToolError(f"no pending follow-up #{args.id} for this user")
        return f"Cancelled follow-up #{args.id}."

    async def listing(self, scope: Scope, args: NoArgs) -> str:
        def here(chat: int) -> bool:  # in a group, only what belongs to this chat
            return not scope.in_group or chat == scope.chat_pk

        zone = user_prefs(scope.timezone, {}, self.policy).zone
        intents = [i for i in await self.store.pending_intents(scope.user_pk) if here(i.chat_pk)]
        triggers = [t for t in await self.store.pending_triggers(scope.user_pk) if here(t.chat_pk)]
        since = scope.now_ms - 7 * 24 * 3_600_000
        sent = await self.plog.recent(
            scope.user_pk, since_ms=since, chat=scope.chat_pk if scope.in_group else None
        )
        lines = ["Pending follow-ups:" if intents else "No pending follow-ups."]
        lines += [
            f"#{i.id} at {local(i.execute_at, zone):%Y-%m-%d %H:%M} ({i.kind}, "
            f"confidence {i.confidence:.2f}): {i.what}"
            for i in intents
        ]
        if triggers:
            lines.append("Pending check-ins from the passive scan (they run through the gate):")
            lines += [
                f"check-in #{t.id} at {local(t.execute_at, zone):%Y-%m-%d %H:%M} "
                f"({t.kind}): {t.what}"
                for t in triggers
            ]
        if sent:
            lines.append("Proactive messages of the last 7 days (ids for proactive_engage):")
            for m in sent:
                if m.engaged:
                    state = "engaged"
                elif scope.now_ms - m.sent_at <= ENGAGEMENT_WINDOW_MS:
                    state = "no reply yet"
                else:
                    state = "no reply within 24 h"
                lines.append(
                    f"message #{m.id} sent {local(m.sent_at, zone):%Y-%m-%d %H:%M} ({state}): "
                    f"{m.text[:120]}"
                )
        return "\n".join(lines)

    async def quota(self, scope: Scope, args: NoArgs) -> str:
        return await quota_line(self.plog, self.policy, scope)

    async def execute(self, scope: Scope, args: IdArgs) -> str:
        if not await self.store.fire_now(args.id, scope.now_ms):
            raise ToolError(f"no pending follow-up #{args.id}")
        self.wake()
        return f"Follow-up #{args.id} runs at the next tick (policy checks still apply)."

    async def engage(self, scope: Scope, args: IdArgs) -> str:
        if not await self.plog.mark_engaged_id(args.id, scope.now_ms, user=scope.user_pk):
            raise ToolError(
                f"no proactive message #{args.id} of this user that is not yet engaged "
                "(see proactive_list)"
            )
        return f"Recorded that the user engaged with proactive message #{args.id}."

    async def scan(self, scope: Scope, args: NoArgs) -> str:
        assert self.scan_fn is not None
        found = await self.scan_fn()
        return (
            f"Scan done: {found.dormant_user} dormant, {found.unanswered} unanswered, "
            f"{found.engagement_drop} engagement-drop trigger(s) added."
        )


async def quota_line(plog: ProactiveLog, policy: PolicyConfig, scope: Scope) -> str:
    zone = user_prefs(scope.timezone, {}, policy).zone
    seen = await plog.overview(
        scope.user_pk, day_start_ms=local_day_start_ms(scope.now_ms, zone), now_ms=scope.now_ms
    )
    return render_quota(seen, policy)


def render_quota(seen: Overview, policy: PolicyConfig) -> str:
    rate = seen.engagement_rate
    left = max(0, policy.per_user_daily - seen.used_today)
    engagement = "no data yet" if rate is None else f"{rate:.0%} of proactive messages get replies"
    return (
        f"Proactive quota: {left}/{policy.per_user_daily} left today (user-local day). "
        f"Engagement: {engagement} (30 days)."
    )
