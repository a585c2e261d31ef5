"""`iris run` as a child process of a test: started, watched for "iris is running" on its
stderr (kept in `iris.log` beside its config), stopped or killed with SIGKILL, and started again
on the same vault. The subprocess tests of crashes and replicas share it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


class Child:
    """One `iris run` after another on the same vault; `up` is set while one is serving."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.config, self.log = config, config.with_name("iris.log")
        base = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
        self.env = base | env | {"PYTHONPATH": str(ROOT)}  # this checkout, whatever is installed
        self.runs = 0  # how many have started
        self.up = False  # the current one serves
        self.changed = asyncio.Condition()
        self.proc: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None

    async def _set(self, *, up: bool, new_run: bool = False) -> None:
        async with self.changed:
            self.up = up
            self.runs += new_run
            self.changed.notify_all()

    async def serving(self, at_least: int = 0) -> int:
        """Once a run (number `at_least` or later) serves: its number."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.up and self.runs >= at_least)
            return self.runs

    async def ended(self, run: int) -> None:
        """Once run `run` is over (killed or stopped)."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.runs > run or not self.up)

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.app", "run", "--config", str(self.config),
            cwd=self.config.parent, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        await self._set(up=False, new_run=True)
        self.reader = asyncio.create_task(self._read(self.proc))

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        with self.log.open("ab") as log:
            async for line in proc.stderr:
                log.write(line)
                if b"iris is running" in line:
                    await self._set(up=True)

    async def stop(self, *, kill: bool) -> int:
        assert self.proc is not None and self.reader is not None
        await self._set(up=False)
        (self.proc.kill if kill else self.proc.terminate)()
        code = await self.proc.wait()
        await self.reader
        return code
