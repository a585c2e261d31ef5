"""`bench/replicas.py --smoke` as a process: a throwaway PostgreSQL, one `iris run` replica
killed with SIGKILL and restarted while signed Slack events and Telegram webhook updates
arrive. The bench's pieces (fakes, driver, process control, verdict) work end to end: every
message is acknowledged after the redeliveries, and the verdict lines are printed with their
counts, including the replica's uncertain sends."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_the_replicas_bench_runs_a_kill_and_reports(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    done = subprocess.run(
        [sys.executable, "bench/replicas.py", "--smoke", "--workdir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    sent = re.search(r"(\d+) messages: (\d+) acknowledged .* (\d+) never acknowledged", out)
    assert sent is not None, out + done.stderr[-2000:]
    assert sent.groups()[:2] == ("24", "24") and sent.group(3) == "0", out
    assert re.search(r"load: 24 messages in \d+ s, [1-9]\d* kills", out), out
    for verdict in ("inbound lost", "replies out of order within a chat", "duplicate replies"):
        assert re.search(rf"  {verdict}: \d+ ", out), out
    assert done.returncode in (0, 1), out + done.stderr[-2000:]
