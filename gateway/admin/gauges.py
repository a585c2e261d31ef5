"""Metrics read from the vault when `/metrics` is scraped: outbox backlog, file size, and
totals of append-only tables (analyzer suggestions). Registered by `gateway/app.py`."""

from __future__ import annotations

from gateway.core.metrics import LabelValues, Metrics
from vault.db import Vault
from vault.outbox import Outbox

OUTBOX_STATUSES = ("pending", "sending", "sent", "failed", "uncertain")


def register_vault_metrics(metrics: Metrics, vault: Vault, outbox: Outbox) -> None:
    async def outbox_rows() -> dict[LabelValues, float]:
        counts = await outbox.counts()
        return {(status,): float(counts.get(status, 0)) for status in OUTBOX_STATUSES}

    async def vault_bytes() -> dict[LabelValues, float]:
        size = await vault.scalar(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
        )
        return {(): float(size or 0)}

    async def suggestions() -> dict[LabelValues, float]:
        rows = await vault.fetchall(
            "SELECT event, command, count(*) FROM analyzer_events GROUP BY event, command"
        )
        return {(str(r[0]), str(r[1])): float(r[2]) for r in rows}

    metrics.gauge("iris_outbox_messages", "Outbox rows by status.", ("status",), outbox_rows)
    metrics.gauge("iris_vault_bytes", "Size of the vault database (pages in use).", (), vault_bytes)
    metrics.gauge(
        "iris_analyzer_suggestions_total",
        "Inline suggestions shown and followed, by command.",
        ("event", "command"),
        suggestions,
        kind="counter",
    )
