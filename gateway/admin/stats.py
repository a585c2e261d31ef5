"""Usage figures for `/admin stats` and `GET /stats`: the last 24 hours and the last 30 days.

Everything is derived from the vault (messages, model calls, analyzer events, and whatever
extra sections other packages contribute — the proactive engine adds its outcomes and
engagement), so the figures survive restarts and two readers always agree. Beside the windows,
`replicas` (set by the composition root) lists the `iris run` replicas seen in the last minute
with their in-memory counters added up, whichever replica answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.features.contributions import StatsSection
from vault.analyzer import AnalyzerStore
from vault.db import Vault
from vault.reports import Reports
from vault.usage import UsageLog

DAY_MS = 86_400_000
WINDOWS = {"24h": DAY_MS, "30d": 30 * DAY_MS}
Replicas = Callable[[int], Awaitable[dict[str, Any]]]


class Stats:
    def __init__(self, *, vault: Vault, usage: UsageLog, analyzer: AnalyzerStore) -> None:
        self.vault = vault
        self.reports = Reports(vault)
        self.usage = usage
        self.analyzer = analyzer
        self.sections: dict[str, StatsSection] = {}
        self.replicas: Replicas | None = None

    async def collect(self, now_ms: int) -> dict[str, Any]:
        figures = {label: await self._window(now_ms - span) for label, span in WINDOWS.items()}
        if self.replicas is not None:
            figures["replicas"] = await self.replicas(now_ms)
        return figures

    async def _window(self, since_ms: int) -> dict[str, Any]:
        rows = await self.reports.message_counts(since_ms)
        messages: dict[str, dict[str, int]] = {}
        for channel, role, count in rows:
            messages.setdefault(channel, {"in": 0, "out": 0})["in" if role == "user" else "out"] = (
                count
            )
        calls, tokens_in, tokens_out = await self.usage.totals(since_ms)
        suggestions = await self.analyzer.counts(since_ms)
        window: dict[str, Any] = {
            "messages": messages,
            "model": {"calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out},
            "analyzer": {"shown": suggestions.shown, "followed": suggestions.followed},
        }
        for name, section in self.sections.items():
            window[name] = await section(since_ms)
        return window


def render(figures: dict[str, Any]) -> str:
    """Plain text for chat (markdown-light, so every channel can format it)."""
    lines: list[str] = []
    for label, window in figures.items():
        if label == "replicas":
            lines.extend(_replicas(window))
            continue
        lines.append(f"*Last {label}*")
        for key, value in window.items():
            lines.append(f"{key}: {_flat(value)}")
        lines.append("")
    return "\n".join(lines).strip()


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        if not value:
            return "none"
        return ", ".join(f"{k} {_flat(v)}" for k, v in value.items())
    if isinstance(value, bool):  # before the numbers: a bool is an int too
        return "yes" if value else "no"
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.0%}" if 0 <= value <= 1 else f"{value:.2f}"
    return str(value)


def _replicas(seen: dict[str, Any]) -> list[str]:
    lines = ["*Replicas seen in the last minute*"]
    for r in seen["replicas"]:
        leads = ", ".join(r["leaderships"]) or "nothing"
        lines.append(f"{r['id']}: leads {leads}")
    lines.append("*Counters, all replicas*")
    for name, series in sorted(seen["counters"].items()):
        if series:
            parts = (f"{labels or 'all'} {value:g}" for labels, value in sorted(series.items()))
            lines.append(f"{name.removeprefix('iris_')}: {', '.join(parts)}")
    lines.append("")
    return lines
