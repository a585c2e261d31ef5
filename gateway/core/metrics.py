"""In-process metrics and their Prometheus text exposition (format 0.0.4).

Counters and histograms live in memory and count since the process started, which is what
Prometheus expects (it handles restarts). Gauges that describe the vault (outbox backlog,
file size) are computed when scraped, by callbacks registered by the app. Names are prefixed
`iris_`; label values are escaped as the format requires.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

LabelValues = tuple[str, ...]
GaugeReader = Callable[[], Awaitable[Mapping[LabelValues, float]]]

LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_BUCKETS = (64, 256, 1024, 4096, 16384, 65536)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: LabelValues, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


@dataclass
class Counter:
    name: str
    help: str
    label_names: tuple[str, ...] = ()
    values: dict[LabelValues, float] = field(default_factory=dict)

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for labels, value in sorted(self.values.items()):
            lines.append(f"{self.name}{_labels(self.label_names, labels)} {_number(value)}")
        return lines


@dataclass
class Histogram:
    name: str
    help: str
    buckets: tuple[float, ...]
    label_names: tuple[str, ...] = ()
    series: dict[LabelValues, tuple[list[int], list[float]]] = field(default_factory=dict)

    def observe(self, value: float, *labels: str) -> None:
        counts, totals = self.series.setdefault(labels, ([0] * (len(self.buckets) + 1), [0.0]))
        counts[bisect.bisect_left(self.buckets, value)] += 1
        totals[0] += value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for labels, (counts, totals) in sorted(self.series.items()):
            cumulative = 0
            for bound, count in zip((*self.buckets, math.inf), counts, strict=True):
                cumulative += count
                le = f'le="{_number(bound)}"'
                lines.append(
                    f"{self.name}_bucket{_labels(self.label_names, labels, le)} {cumulative}"
                )
            lines.append(f"{self.name}_sum{_labels(self.label_names, labels)} {_number(totals[0])}")
            lines.append(f"{self.name}_count{_labels(self.label_names, labels)} {cumulative}")
        return lines


@dataclass
class Gauge:
    """A value read when scraped. `kind="counter"` for totals kept in the vault (append-only
    tables only ever grow, so they are counters even though they are read, not incremented)."""

    name: str
    help: str
    label_names: tuple[str, ...]
    read: GaugeReader
    kind: str = "gauge"

    async def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in sorted((await self.read()).items()):
            lines.append(f"{self.name}{_labels(self.label_names, labels)} {_number(value)}")
        return lines


class Metrics:
    """The registry. Components get it from the app and keep references to their metrics."""

    def __init__(self) -> None:
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        self._gauges: dict[str, Gauge] = {}
        self.inbound = self.counter(
            "iris_inbound_messages_total", "Messages received, by channel.", ("channel",)
        )
        self.intake = self.counter(
            "iris_intake_total",
            "Inbound deliveries at intake: saved, replayed at start, rejected, or unsaved "
            "(the vault refused them; the platform redelivers).",
            ("event",),
        )
        self.outbound = self.counter(
            "iris_outbound_messages_total",
            "Messages sent or attempted, by channel, kind and outcome.",
            ("channel", "kind", "status"),
        )
        self.delivery_attempts = self.counter(
            "iris_delivery_attempts_total",
            "Send calls to a channel, by result: sent, transient (not sent, retried), uncertain "
            "(may have arrived, never resent), permanent, unreachable, error (unexpected).",
            ("channel", "result"),
        )
        self.delivery_deferred = self.counter(
            "iris_delivery_deferred_total",
            "Messages left to the background resend instead of waiting in the turn, by reason: "
            "retry_after, backoff, or behind (an earlier message to the chat still waits).",
            ("channel", "reason"),
        )
        self.model_calls = self.counter(
            "iris_model_calls_total",
            "Model requests, by purpose and outcome.",
            ("purpose", "outcome"),
        )
        self.model_latency = self.histogram(
            "iris_model_latency_seconds", "Model request latency.", LATENCY_BUCKETS_S, ("purpose",)
        )
        self.model_tokens = self.histogram(
            "iris_model_tokens", "Tokens per model request.", TOKEN_BUCKETS, ("direction",)
        )

    def counter(self, name: str, help: str, labels: tuple[str, ...] = ()) -> Counter:
        return self._counters.setdefault(name, Counter(name, help, labels))

    def histogram(
        self, name: str, help: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()
    ) -> Histogram:
        return self._histograms.setdefault(name, Histogram(name, help, buckets, labels))

    def gauge(
        self,
        name: str,
        help: str,
        labels: tuple[str, ...],
        read: GaugeReader,
        *,
        kind: str = "gauge",
    ) -> None:
        self._gauges[name] = Gauge(name, help, labels, read, kind)

    def counter_values(self) -> dict[str, dict[str, float]]:
        """Every counter's series (label values joined by ","), for the replica heartbeat
        that lets usage figures add up the counters of every replica."""
        return {
            name: {",".join(labels): value for labels, value in counter.values.items()}
            for name, counter in self._counters.items()
        }

    async def render(self) -> str:
        lines: list[str] = []
        for counter in self._counters.values():
            lines.extend(counter.render())
        for histogram in self._histograms.values():
            lines.extend(histogram.render())
        for gauge in self._gauges.values():
            lines.extend(await gauge.render())
        return "\n".join(lines) + "\n"
