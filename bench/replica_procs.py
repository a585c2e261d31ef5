"""The processes of `bench/replicas.py`: a throwaway PostgreSQL (pgserver's wheel, else a system
`initdb`/`pg_ctl`, as the tests start it) and the `iris run` replicas on it, each with its own
config file, HTTP port and log, started, killed with SIGKILL, stopped with SIGTERM.

A replica counts as up once it logged "iris is running" (its HTTP server listens by then; a
channel still connecting answers 503, which the driver treats like a platform would: it
redelivers). The CPU time a replica used is read from /proc when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gateway.app.config_vault import VaultSection

ROOT = Path(__file__).resolve().parent.parent
TELEGRAM_TOKEN = "123:bench-token"
WEBHOOK_SECRET = "bench-webhook-secret"
SLACK_TOKEN = "xoxb-bench"
SIGNING_SECRET = "bench-signing-secret"
API_TOKEN = "bench-api-token"


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """The admin URL of a throwaway PostgreSQL (fsync off: its data dies with the run)."""
    sys.path.insert(0, str(ROOT))
    from tests.fakes.postgres import _serve  # the tests' own start-up: pgserver or system

    with tempfile.TemporaryDirectory(prefix="iris-bench-pg-") as root:
        Path(root).chmod(0o755)
        serving = _serve(Path(root))
        server = next(serving)
        try:
            yield server.admin_url
        finally:
            with contextlib.suppress(StopIteration):
                next(serving)


def create_database(admin_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())
        conn.execute(f"CREATE DATABASE {name}".encode())
    return admin_url.replace("/postgres?", f"/{name}?", 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Mode:
    telegram: str  # "webhook" or "polling"
    slack: bool  # Slack HTTP events on
    proactive_poll_s: float = 1.0


class Replica:
    def __init__(self, index: int, workdir: Path, db_url: str, world_url: str, mode: Mode) -> None:
        self.index, self.port = index, free_port()
        self.dir = workdir / f"r{index}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "iris.log"
        self.config = self.dir / "config.toml"
        self.config.write_text(_config(index, self.dir, db_url, world_url, self.port, mode))
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTH"))}
        self.env = inherited | {
            "PYTHONPATH": str(ROOT),
            "ANTHROPIC_API_KEY": "k",
            "IRIS_LLM__BASE_URL": f"{world_url}/r{index}",
            "IRIS_API_TOKEN": API_TOKEN,
            "TELEGRAM_BOT_TOKEN": TELEGRAM_TOKEN,
            "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "SLACK_BOT_TOKEN": SLACK_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        }
        self.proc: asyncio.subprocess.Process | None = None
        self.up = asyncio.Event()
        self.starts = 0
        self.cpu_s = 0.0  # of the runs that ended
        self.warnings = 0
        self.first_errors: list[str] = []
        self._reader: asyncio.Task[None] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.up.clear()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.app", "run", "--config", str(self.config),
            cwd=self.dir, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.starts += 1
        self._reader = asyncio.create_task(self._read(self.proc))

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        with self.log.open("ab") as log:
            async for line in proc.stderr:
                log.write(line)
                log.flush()
                if b"iris is running" in line:
                    self.up.set()
                elif b" WARNING " in line or b" ERROR " in line:
                    self.warnings += 1
                    if len(self.first_errors) < 3 and b"slack_bolt" not in line:
                        self.first_errors.append(line.decode(errors="replace").strip()[:200])

    def cpu_now(self) -> float:
        """CPU seconds used by all its runs so far, the current one included."""
        return self.cpu_s + (_cpu_s(self.proc.pid) if self.proc is not None else 0.0)

    async def ready(self) -> None:
        """Until it serves; `RuntimeError` with its log's end if it exits first."""
        proc = self.proc
        assert proc is not None
        up, exited = asyncio.create_task(self.up.wait()), asyncio.create_task(proc.wait())
        try:
            await asyncio.wait([up, exited], return_when=asyncio.FIRST_COMPLETED)
        finally:
            up.cancel()
            exited.cancel()
        if not self.up.is_set():
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"replica r{self.index} exited before serving:\n{tail}")

    async def end(self, *, kill: bool) -> int:
        """SIGKILL (`kill`) or SIGTERM; the exit code once it is gone."""
        proc, reader = self.proc, self._reader
        if proc is None or reader is None:
            return 0
        self.up.clear()
        self.cpu_s += _cpu_s(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            (proc.kill if kill else proc.terminate)()
        code = await proc.wait()
        await reader
        self.proc = None
        return code


def _cpu_s(pid: int) -> float:
    """User + system CPU of a live process and its reaped children, in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s(admin_url: str) -> float:
    """CPU seconds of the PostgreSQL server (its postmaster and live backends), found through
    the lock file beside its socket; backends that already ended are not counted."""
    host = admin_url.partition("host=")[2].split("&")[0]
    locks = sorted(Path(host).glob(".s.PGSQL.*.lock")) if host else []
    if not locks:
        return 0.0
    postmaster = int(locks[0].read_text().split()[0])
    total = _cpu_s(postmaster)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            total += _cpu_s(int(stat.parent.name))
    return total


def _config(index: int, home: Path, db_url: str, world: str, port: int, mode: Mode) -> str:
    replica_id = f'replica_id = "r{index}"\n' if "replica_id" in VaultSection.model_fields else ""
    slack = (
        f'[slack]\nenabled = true\nmode = "http"\napi_url = "{world}/r{index}/api/"\n'
        if mode.slack
        else ""
    )
    return (
        f'[vault]\npath = "{home / "unused.db"}"\nurl = "{db_url}"\n{replica_id}'
        f'[auth]\nallow = ["telegram:*", "slack:*"]\n'
        f'[telegram]\nenabled = true\nmode = "{mode.telegram}"\n'
        f'base_url = "{world}/r{index}/bot"\n'
        f'webhook_url = "https://iris.example/telegram/webhook"\n'
        f"{slack}"
        f"[http]\nenabled = true\nport = {port}\n"
        f"[proactive]\nenabled = true\npoll_interval_s = {mode.proactive_poll_s}\n"
        "jitter_max_minutes = 0\n"
        '[log]\nlevel = "INFO"\n'
    )
