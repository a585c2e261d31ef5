from __future__ import annotations

from gateway.app.app import App
from gateway.core.metrics import Metrics
from tests.fakes import FakeLLM, MemoryChannel, inbound
from tests.prom import check_histograms, parse, value


async def test_exposition_is_valid_and_escapes_labels() -> None:
    metrics = Metrics()
    metrics.inbound.inc('we"ird\\chan\nnel')
    metrics.model_latency.observe(0.07, "chat")
    metrics.model_latency.observe(99.0, "chat")

    async def backlog() -> dict[tuple[str, ...], float]:
        return {("pending",): 2.0, ("uncertain",): 0.0}

    metrics.gauge("iris_outbox_messages", "Outbox rows by status.", ("status",), backlog)
    types, samples = parse(await metrics.render())
    assert types["iris_outbox_messages"] == "gauge"
    assert (
        value(
            samples,
            "iris_inbound_messages_total",
            channel='we"ird\\chan\nnel'.replace("\\", "\\\\")
            .replace("\n", "\\n")
            .replace('"', '\\"'),
        )
        == 1
    )
    assert value(samples, "iris_model_latency_seconds_count", purpose="chat") == 2
    assert value(samples, "iris_model_latency_seconds_bucket", purpose="chat", le="0.1") == 1
    assert value(samples, "iris_outbox_messages", status="pending") == 2
    check_histograms(types, samples)


async def test_turns_feed_the_counters(app: App, llm: FakeLLM, channel: MemoryChannel) -> None:
    await app.router.submit(inbound("hello"))
    await app.router.submit(inbound("/help"))
    types, samples = parse(await app.metrics.render())
    assert value(samples, "iris_inbound_messages_total", channel="memory") == 2
    assert (
        value(
            samples, "iris_outbound_messages_total", channel="memory", kind="reply", status="sent"
        )
        == 2
    )
    assert value(samples, "iris_model_calls_total", purpose="chat", outcome="ok") == 1
    check_histograms(types, samples)


async def test_vault_backed_metrics(app: App, channel: MemoryChannel) -> None:
    await app.router.submit(inbound("hello"))
    types, samples = parse(await app.metrics.render())
    assert value(samples, "iris_outbox_messages", status="sent") == 1
    assert value(samples, "iris_outbox_messages", status="uncertain") == 0
    assert value(samples, "iris_vault_bytes") > 0
    assert types["iris_analyzer_suggestions_total"] == "counter"
