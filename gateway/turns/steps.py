"""The router's pipeline steps, each a small `async (turn, next)` function built by a factory.

Order (see `gateway/app/app.py`): dedupe -> auth -> record -> hooks (engagement, the
analyzer's observation) -> command -> the features' steps (the analyzer's tip) -> agent.
Delivery happens inside the steps that answer, through the `Replier`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.agent.agent import Agent
from gateway.agent.context import estimate_tokens
from gateway.agent.providers import UNREAD_TOKENS
from gateway.core.errors import UserInputError, VaultError
from gateway.core.messages import ChatKind, OutboundKind
from gateway.core.scope import Scope
from gateway.turns.auth import Authorizer, Decision
from gateway.turns.commands import CommandCall, CommandRegistry, parse_command
from gateway.turns.replies import Replier
from gateway.turns.resume import Resumer
from gateway.turns.turn import Next, Step, Turn, TurnHook
from vault.conversations import Conversations, RecordHook
from vault.inbound import InboundLog
from vault.pairing import AccessStore

log = logging.getLogger(__name__)

NOT_AUTHORIZED = (
    "Sorry — you're not authorized to use this assistant. Ask the admin to add `{id}` to "
    "[auth] allow."
)
NOT_AUTHORIZED_PAIRING = (
    "Sorry — you're not authorized to use this assistant yet. Your pairing code is {code}: "
    "an admin can let you in with `{allow} {code}` (your id is `{id}`)."
)
EMPTY_MESSAGE = (
    "I can only read text, and this message had none (a sticker, a voice note, a photo or a "
    "file without a caption?). Please write it out."
)
TOO_LONG = (
    "That message is too long ({length} characters; the limit is {limit}). It is saved, but I "
    "won't answer it: please shorten it or split it into parts."
)


def dedupe_keys(turn: Turn) -> list[str]:
    inbound = turn.inbound
    keys = list(inbound.dedupe_keys)
    if inbound.message_id:
        keys.append(f"{inbound.chat.key}:msg:{inbound.message_id}")
    return keys


RECENT_KEYS = 20_000
# How stale this process's copy of admins' access decisions may be (one small read per period).
GRANTS_RELOAD_MS = 5_000


def dedupe_step() -> Step:
    """Drop redeliveries early, from memory; the record step's claim is the authority.

    The record step claims a message's keys in the vault in the transaction that stores it,
    so a redelivery after a restart is still caught there. This step only remembers the keys
    of recently recorded messages, sparing the common retry (Slack's, a webhook's) a vault
    round trip and the work before recording.
    """
    recent: OrderedDict[str, None] = OrderedDict()

    async def dedupe(turn: Turn, nxt: Next) -> None:
        keys = dedupe_keys(turn)
        if any(key in recent for key in keys):
            log.info("duplicate delivery of %s dropped", turn.inbound.message_id)
            return
        await nxt(turn)
        if turn.recorded is not None:
            for key in keys:
                recent[key] = None
            while len(recent) > RECENT_KEYS:
                recent.popitem(last=False)

    return dedupe


def auth_step(
    authorizer: Authorizer,
    inbound_log: InboundLog,
    replier: Replier,
    pairing: AccessStore | None = None,
) -> Step:
    """Let allowed users on; tell a stranger in a DM once a day how to get in.

    With `pairing` (and `[auth] pairing` on), the notice carries the stranger's pairing code
    (`vault/pairing.py`) and the admin command that uses it, as typed on their platform.
    """

    reloaded_ms = -GRANTS_RELOAD_MS

    async def reload(now_ms: int) -> None:
        """Admins' decisions made by another process (`/admin allow` in an `iris chat`, on
        another replica) apply here within `GRANTS_RELOAD_MS`."""
        nonlocal reloaded_ms
        if pairing is None or now_ms - reloaded_ms < GRANTS_RELOAD_MS:
            return
        reloaded_ms = now_ms  # before the read: the turns meanwhile do not read again
        mark = authorizer.mark()
        try:
            authorizer.use(await pairing.grants(), since=mark)
        except VaultError as exc:  # the record step says what matters; these still hold
            log.warning("could not reload access decisions: %s", exc)

    async def auth(turn: Turn, nxt: Next) -> None:
        await reload(turn.now_ms)
        decision = authorizer.decide(turn.inbound)
        if decision is Decision.ALLOW:
            turn.authorized = True
            turn.is_admin = authorizer.is_admin(turn.inbound.user)
            await nxt(turn)
            return
        if decision is Decision.DENY_NOTICE:
            user = turn.inbound.user
            day = datetime.fromtimestamp(turn.now_ms / 1000, UTC).date().isoformat()
            if await inbound_log.first_sighting(
                [f"notice:unauthorized:{user.key}:{day}"], turn.now_ms
            ):
                text = NOT_AUTHORIZED.format(id=user.key)
                if pairing is not None and authorizer.pairing:
                    code = await pairing.code_for(
                        user.channel, user.user_id, user.display_name, turn.now_ms
                    )
                    allow = replier.hint_for(user.channel)("admin") + " allow"
                    text = NOT_AUTHORIZED_PAIRING.format(code=code, allow=allow, id=user.key)
                await replier.send(turn, text, kind="notice", out_kind=OutboundKind.NOTICE)
            log.info("not authorized: %s", user.key)

    return auth


def record_step(
    conversations: Conversations,
    *,
    max_chars: int,
    hooks: Sequence[RecordHook] = (),
    resumer: Resumer | None = None,
) -> Step:
    """Record the message (and claim its dedupe keys, and run `hooks`) in one transaction.

    A replayed message (saved before a restart) that was recorded already is resumed, or ends
    here if it was answered (`gateway/turns/resume.py`); one too old to answer is recorded
    and gets a notice instead.
    """

    async def record(turn: Turn, nxt: Next) -> None:
        inbound = turn.inbound
        text = inbound.text.strip()
        if not text:
            raise UserInputError(EMPTY_MESSAGE)
        turn.command = parse_command(text)
        # A message over the limit is never given to the model (a stand-in is, `providers.py`):
        # its recorded size is the stand-in's, so every count of the history stays true.
        tokens = UNREAD_TOKENS if len(text) > max_chars else estimate_tokens(text)
        recorded = await conversations.record_inbound(
            inbound,
            kind="command" if turn.command else "chat",
            tokens=tokens,
            now_ms=turn.now_ms,
            dedupe_keys=tuple(dedupe_keys(turn)),
            hooks=hooks,
        )
        if recorded is None and turn.replay and resumer is not None:
            recorded = await resumer.pick_up(turn)
            if recorded is None:
                return
            turn.resumed = True
        elif recorded is None:  # a concurrent redelivery claimed the keys first
            log.info("duplicate delivery of %s dropped", inbound.message_id)
            return
        elif turn.replay and resumer is not None and resumer.too_old(turn):
            turn.recorded = recorded
            await resumer.notify_too_old(turn)
            return
        turn.recorded = recorded
        turn.scope = Scope(
            user=inbound.user,
            chat=inbound.chat,
            user_pk=recorded.user_pk,
            chat_pk=recorded.chat_pk,
            session_pk=recorded.session_pk,
            message_pk=recorded.message_pk,
            text=text,
            now_ms=turn.now_ms,
            timezone=recorded.timezone,
            is_admin=turn.is_admin,
            summary=recorded.summary,
            session_started_ms=recorded.session_started_ms,
            in_group=inbound.kind is ChatKind.GROUP,
        )
        if len(text) > max_chars:
            raise UserInputError(TOO_LONG.format(length=len(text), limit=max_chars))
        await nxt(turn)

    return record


def hooks_step(hooks: Sequence[TurnHook]) -> Step:
    """Side effects of a user writing (engagement marking); a failing hook never costs the reply."""

    async def run_hooks(turn: Turn, nxt: Next) -> None:
        for hook in () if turn.resumed else hooks:  # a resumed message ran them before
            try:
                await hook(turn)
            except Exception:
                log.exception("turn hook %s failed", getattr(hook, "__name__", hook))
        await nxt(turn)

    return run_hooks


def command_step(registry: CommandRegistry, replier: Replier) -> Step:
    async def command(turn: Turn, nxt: Next) -> None:
        if turn.command is None or turn.scope is None:
            await nxt(turn)
            return
        name, args = turn.command
        hint = replier.hint_for(turn.inbound.chat.channel)
        text = await registry.run(CommandCall(name=name, args=args, scope=turn.scope, hint=hint))
        await replier.send(turn, text, kind="command")

    return command


# A replayed message (saved before a stop, a crash or a vault outage) answered at least this
# long after it was sent says which message it answers: the user may have moved on.
LATE_MS = 60_000
LATE = "(Answering your message from {when}: “{excerpt}”)\n\n"
EXCERPT_CHARS = 60


def late_note(turn: Turn) -> str:
    """The line a late answer to a replayed message starts with, or ""."""
    at, scope = turn.inbound.at_ms, turn.scope
    if not turn.replay or at <= 0 or scope is None or turn.now_ms - at < LATE_MS:
        return ""
    try:
        zone, label = ZoneInfo(scope.timezone or "UTC"), "" if scope.timezone else " UTC"
    except (ValueError, ZoneInfoNotFoundError):
        zone, label = ZoneInfo("UTC"), " UTC"
    sent = datetime.fromtimestamp(at / 1000, zone)
    now = datetime.fromtimestamp(turn.now_ms / 1000, zone)
    when = sent.strftime("%H:%M" if sent.date() == now.date() else "%Y-%m-%d %H:%M") + label
    words = " ".join(scope.text.split())
    if len(words) > EXCERPT_CHARS:
        words = words[:EXCERPT_CHARS].rstrip() + "…"
    return LATE.format(when=when, excerpt=words)


def agent_step(agent: Agent, replier: Replier) -> Step:
    async def respond(turn: Turn, nxt: Next) -> None:
        assert turn.scope is not None, "the record step must run before the agent"
        async with replier.typing(turn.inbound.chat):
            reply = await agent.respond(turn.scope)
            if turn.before_reply:
                await asyncio.wait(turn.before_reply)
        await replier.send(turn, late_note(turn) + reply.text + (turn.suggestion or ""))
        await nxt(turn)

    return respond
