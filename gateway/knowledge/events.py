"""`/context events` and its HTTP twin: the context providers per phase, on/off and priority.

One implementation for chat and HTTP. A change applies to the pipeline at once (from the next
assembly on), is stored in the vault (`vault/context_settings.py`) so a restart keeps it, and is
audited with its actor — refusals too. The stored settings are applied lazily, before the
first turn, command or API call that needs them (`ensure_loaded`), and read again at most every
`RELOAD_S` after that: another process on the same vault (a replica on PostgreSQL, an
`iris chat` beside `iris run`) applies a change within that time.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from gateway.agent.context import ContextPipeline, ProviderInfo
from gateway.core.errors import NotFound, UserInputError, VaultError
from gateway.core.ports import Clock
from vault.audit import AuditLog, Outcome
from vault.context_settings import ContextSettings, ProviderSetting

log = logging.getLogger(__name__)

REQUIRED = frozenset({"message"})  # the current message is never switched off
PRIORITY_RANGE = range(-1000, 1001)
RELOAD_S = 5  # how stale another process's change may be here (one small read per period)


class ProviderEvents:
    def __init__(
        self, *, pipeline: ContextPipeline, store: ContextSettings, audit: AuditLog, clock: Clock
    ) -> None:
        self.pipeline = pipeline
        self.store = store
        self.audit = audit
        self.clock = clock
        self._loaded_ms: int | None = None
        self._unknown: set[str] = set()  # stored names not running here, warned about once
        # Changes made here, and those not yet stored: a read that overlapped one is not
        # applied (it may hold the row as it was before).
        self._changes = 0
        self._storing = 0

    async def ensure_loaded(self) -> None:
        """Apply the stored settings, if they were not read in the last `RELOAD_S`."""
        now_ms = self.clock.now_ms()
        if self._loaded_ms is not None and now_ms - self._loaded_ms < RELOAD_S * 1000:
            return
        changes = self._changes
        try:
            stored = await self.store.all()
        except VaultError:
            if self._loaded_ms is None:
                raise  # never read: the turn cannot know what is switched off
            log.warning("context provider settings not read again; keeping the last ones")
            self._loaded_ms = now_ms  # try again a period later
            return
        if changes != self._changes or self._storing:
            return  # read before a change made here meanwhile: the next call reads again
        defaults = {p.name: p.default_priority for p in self.pipeline.providers()}
        for setting in stored:
            if setting.name not in defaults:
                if setting.name not in self._unknown:
                    self._unknown.add(setting.name)
                    log.warning("context provider %r in the vault is not running", setting.name)
                continue
            priority = defaults[setting.name] if setting.priority is None else setting.priority
            self.pipeline.configure(setting.name, enabled=setting.enabled, priority=priority)
        self._loaded_ms = now_ms

    async def listing(self) -> list[ProviderInfo]:
        await self.ensure_loaded()
        return self.pipeline.providers()

    async def change(
        self,
        name: str,
        *,
        enabled: bool | None = None,
        priority: int | None = None,
        actor: str,
        via: str,
        audited: bool = True,
    ) -> ProviderInfo:
        """`audited=False` when the caller audits the action itself (the admin API does)."""
        await self.ensure_loaded()
        if priority is not None:
            verb = "priority"
        elif enabled is None:
            verb = "change"  # refused below: nothing to change
        else:
            verb = "enable" if enabled else "disable"
        args: dict[str, Any] = {"name": name, "enabled": enabled, "priority": priority}
        try:
            self._check(name, enabled, priority)
        except UserInputError as exc:
            if audited:
                await self._audit(actor, via, verb, args, Outcome.REFUSED, exc.user_message)
            raise
        info = self.pipeline.configure(name, enabled=enabled, priority=priority)
        self._changes += 1
        self._storing += 1
        custom = info.priority if info.priority != info.default_priority else None
        try:
            await self.store.put(
                ProviderSetting(name=name, enabled=info.enabled, priority=custom),
                actor=actor,
                now_ms=self.clock.now_ms(),
            )
        finally:
            self._storing -= 1
        if audited:
            await self._audit(actor, via, verb, args, Outcome.OK, describe(info))
        return info

    async def refused(self, actor: str, via: str, args: str) -> None:
        """A non-admin tried `/context events`."""
        verb, _, rest = args.strip().partition(" ")
        verb = verb.lower()[:40]
        await self._audit(actor, via, verb, {"args": rest}, Outcome.REFUSED, "not allowed")

    def _check(self, name: str, enabled: bool | None, priority: int | None) -> None:
        names = [p.name for p in self.pipeline.providers()]
        if name not in names:
            raise NotFound(
                f"Unknown context provider '{name[:40]}'. Providers: {', '.join(names)}."
            )
        if enabled is None and priority is None:
            raise UserInputError("Nothing to change: give 'enabled', 'priority' or both.")
        if enabled is False and name in REQUIRED:
            raise UserInputError(f"The '{name}' provider cannot be switched off.")
        if priority is not None and priority not in PRIORITY_RANGE:
            raise UserInputError("A priority is a whole number from -1000 to 1000.")

    async def _audit(
        self, actor: str, via: str, verb: str, args: dict[str, Any], outcome: Outcome, result: str
    ) -> None:
        await self.audit.record(
            actor=actor,
            via=via,
            action=f"context events {verb}".strip(),
            args=args,
            outcome=outcome,
            result=result,
            now_ms=self.clock.now_ms(),
        )


def describe(info: ProviderInfo) -> str:
    default = info.default_priority
    changed = f" (default {default})" if info.priority != default else ""
    state = "on" if info.enabled else "off"
    return f"{info.name}: {info.phase}, priority {info.priority}{changed}, {state}"


def as_json(info: ProviderInfo) -> dict[str, Any]:
    return asdict(info)
