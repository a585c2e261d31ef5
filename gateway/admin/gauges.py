"""Metrics read from the vault when `/metrics` is scraped: outbox backlog, file size, and
totals of append-only tables (analyzer suggestions). Registered by `gateway/app/app.py`."""

from __future__ import annotations

from gateway.core.metrics import LabelValues, Metrics
from vault.analyzer import AnalyzerStore
from vault.db import Vault
from vault.outbox import Outbox
from vault.reports import Reports

OUTBOX_STATUSES = ("pending", "sending", "sent", "failed", "uncertain")


def register_vault_metrics(metrics: Metrics, vault: Vault, outbox: Outbox) -> None:
    reports = Reports(vault)
    analyzer = AnalyzerStore(vault)

    async def outbox_rows() -> dict[LabelValues, float]:
        counts = await outbox.counts()
        return {(status,): float(counts.get(status, 0)) for status in OUTBOX_STATUSES}

    async def vault_bytes() -> dict[LabelValues, float]:
        return {(): float(await reports.vault_bytes())}

    async def suggestions() -> dict[LabelValues, float]:
        totals = await analyzer.totals()
        return {(event, command): float(n) for (event, command), n in totals.items()}

    metrics.gauge("iris_outbox_messages", "Outbox rows by status.", ("status",), outbox_rows)
    metrics.gauge("iris_vault_bytes", "Size of the vault database (pages in use).", (), vault_bytes)
    metrics.gauge(
        "iris_analyzer_suggestions_total",
        "Inline suggestions shown and followed, by command.",
        ("event", "command"),
        suggestions,
        kind="counter",
    )
