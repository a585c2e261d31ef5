"""`iris simulate`: run the simulator, show its progress on a terminal, print and save the report.

The progress bar goes to stderr and only when both stdout and stderr are terminals and the
output is not `--json`: piped output and JSON stay exactly the report. `--workers N` runs the
population in N processes (`proactive/sim_shards.py`); the report is the same for any N. The
exit code is 1 when the report counts any violation (quiet hours, quotas, spacing, duplicates,
unfinished items).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TextIO

from proactive.engine import EngineConfig
from proactive.policy import PolicyConfig
from proactive.settings import ProactiveSection
from proactive.sim_html import render_html
from proactive.sim_report import VIOLATIONS, render_text
from proactive.sim_shards import quiet_logs, run
from proactive.simulate import SimConfig

DAY_MS = 86_400_000


class TerminalProgress:
    """`simulating [##########··········] 50%  day 15/30  12 s`, redrawn in place."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.started = time.monotonic()
        self._shown = -1

    def __call__(self, done_ms: int, total_ms: int) -> None:
        percent = 100 * done_ms // max(total_ms, 1)
        if percent == self._shown:
            return
        self._shown = percent
        filled = self.width * percent // 100
        bar = "#" * filled + "·" * (self.width - filled)
        day, days = done_ms // DAY_MS + (percent < 100), total_ms // DAY_MS
        elapsed = time.monotonic() - self.started
        self.stream.write(f"\rsimulating [{bar}] {percent:3d}%  day {day}/{days}  {elapsed:.0f} s")
        self.stream.flush()

    def close(self) -> None:
        done = f"\rsimulated in {time.monotonic() - self.started:.1f} s"
        self.stream.write(done.ljust(72) + "\n")
        self.stream.flush()


async def run_simulation(
    section: ProactiveSection,
    *,
    users: int,
    days: int,
    seed: int,
    global_daily: int | None = None,
    workers: int = 1,
    as_json: bool,
    html_path: Path | None,
    out: TextIO,
    err: TextIO,
) -> int:
    quiet_logs()
    bar = None
    if not as_json and out.isatty() and err.isatty():
        bar = TerminalProgress(err)
    try:
        report, used = await run(
            SimConfig(users=users, days=days, seed=seed, global_daily=global_daily),
            PolicyConfig.from_section(section),
            EngineConfig.from_section(section),
            workers=workers,
            progress=bar,
        )
    finally:
        if bar is not None:
            bar.close()
    if used < min(workers, users):
        print("simulated in one process: the global quota could refuse sends, which couples "
              "the users", file=err)  # fmt: skip
    if html_path is not None:
        await asyncio.to_thread(html_path.write_text, render_html(report), encoding="utf-8")
    print(json.dumps(report, sort_keys=True) if as_json else render_text(report), file=out)
    return 1 if any(report[k] for k in VIOLATIONS) else 0
