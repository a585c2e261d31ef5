"""What admins changed about the context providers with `/context events` (or the HTTP API):
one row per provider name, on/off and an optional priority; applied by the context pipeline on
the next turn and after a restart. Who changed it goes to the audit log as well.
"""

from __future__ import annotations

from dataclasses import dataclass

from vault.db import Vault


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderSetting:
    name: str
    enabled: bool
    priority: int | None


class ContextSettings:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def all(self) -> list[ProviderSetting]:
        rows = await self.vault.fetchall(
            "SELECT name, enabled, priority FROM context_provider_settings ORDER BY name"
        )
        return [
            ProviderSetting(name=r["name"], enabled=bool(r["enabled"]), priority=r["priority"])
            for r in rows
        ]

    async def put(self, setting: ProviderSetting, *, actor: str, now_ms: int) -> None:
        await self.vault.write(
            """INSERT INTO context_provider_settings (name, enabled, priority, actor, at_ms)
               VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (name) DO UPDATE SET enabled = excluded.enabled,
                   priority = excluded.priority, actor = excluded.actor, at_ms = excluded.at_ms""",
            (setting.name, int(setting.enabled), setting.priority, actor, now_ms),
        )
