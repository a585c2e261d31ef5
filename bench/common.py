"""Shared helpers for the benchmark scripts: percentiles, peak memory, a zero-latency model,
a cProfile summary by library."""

from __future__ import annotations

import pstats
import resource
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

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


ROOT = str(Path(__file__).resolve().parent.parent)
CATEGORIES = (  # (label, path fragments), first match wins
    ("ours: channels/", (f"{ROOT}/channels/",)),
    ("ours: vault/", (f"{ROOT}/vault/",)),
    ("ours: gateway/", (f"{ROOT}/gateway/", f"{ROOT}/proactive/")),
    ("aiosqlite (calls into the vault thread)", ("aiosqlite",)),
    ("model client: anthropic + httpx2", ("anthropic", "httpx2")),
    ("python-telegram-bot", ("/telegram/",)),
    ("httpx/httpcore (PTB's HTTP)", ("httpx", "httpcore", "h11")),
    ("pydantic", ("pydantic",)),
    ("asyncio + sockets", ("asyncio", "selectors", "socket", "ssl")),
    ("json", ("json",)),
)


def profile_summary(path: str, kind: str, messages: int, top: int = 12) -> None:
    """Print a cProfile file's self time by library (`CATEGORIES`) and our top functions.

    Self time, because cumulative time means little for coroutines; a profile sees one thread.
    """
    stats: dict[Any, Any] = pstats.Stats(path).stats  # type: ignore[attr-defined]
    groups: dict[str, float] = defaultdict(float)
    ours: list[tuple[float, float, str]] = []
    total = 0.0
    for (file, line, func), (_cc, _nc, tt, ct, _callers) in stats.items():
        total += tt
        label = next((lbl for lbl, parts in CATEGORIES if any(p in file for p in parts)), "other")
        if file == "~":
            label = "builtins (C calls)"
        groups[label] += tt
        if label.startswith("ours"):
            short = file.removeprefix(f"{ROOT}/")
            ours.append((tt, ct, f"{short}:{line} {func}"))
    per = 1000 / messages
    print(
        f"\nprofile of {kind} (event-loop thread, self time, {total * per:.1f} ms/msg "
        "under the profiler):"
    )
    for label, tt in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {tt / total:6.1%}  {tt * per:6.2f} ms/msg  {label}")
    if ours:
        print(f"  our top {top} functions by self time (ms/msg):")
        for tt, _ct, name in sorted(ours, reverse=True)[:top]:
            print(f"    {tt * per:6.3f}  {name}")
