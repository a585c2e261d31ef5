"""Shared helpers for the benchmark scripts: percentiles, peak memory, a zero-latency model."""

from __future__ import annotations

import resource
import statistics
import sys
import time

from gateway.core.llm import LLMRequest, LLMResponse, TextPart


class InstantModel:
    """The LLM port answering at once: the benchmark measures the gateway, not a model."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return LLMResponse(
            parts=(TextPart("ok"),),
            stop_reason="end_turn",
            model="instant",
            input_tokens=1,
            output_tokens=1,
        )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.3f} ms, p99 {percentile(values, 99):.3f} ms, "
        f"max {max(values):.3f} ms"
    )


def reference_ms() -> float:
    """The time of a fixed pure-Python loop, best of three: how fast the machine is right now.

    The development VM's speed drifts (a loop like this one took from 0.43 to 0.86 s within an
    hour), so the benchmarks print it beside their figures; compare figures taken at similar
    speeds. It is a rough guide: the speed also changes during a run.
    """
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.process_time() - started)
    return best * 1000


def peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024
