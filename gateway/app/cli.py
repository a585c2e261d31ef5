"""The `iris` command line: the parser, `main`, and the commands that run Iris itself.

Here: run, chat, analyze, audit, simulate. Elsewhere in this package, one module per group:
`cli_init.py` (init), `cli_doctor.py` (doctor), `cli_db.py` (db migrate|backup|restore),
`cli_deploy.py` (slack manifest, service install); `cli_common.py` holds what they share.

Exit codes: 0 success, 1 a check or command failed, 2 bad configuration or usage (before
anything starts). Errors are one line per problem; tracebacks only for bugs. Warnings about
the configuration (a `.env` others can read) go to stderr before the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.app import cli_db, cli_deploy, cli_doctor, cli_init
from gateway.app.cli_common import HelpFormatter, Runner, UsageError, add_command
from gateway.app.config import Config, load_config
from gateway.app.logs import setup_logging
from gateway.core.errors import ConfigError, FatalChannelError, IrisError, SchemaTooNew

if TYPE_CHECKING:
    from gateway.analyzer.detect import Params
    from gateway.analyzer.semantic import SemanticSide

log = logging.getLogger("iris")


def _install_stop_signals(stop: asyncio.Event) -> None:
    """SIGINT or SIGTERM stops (turns in flight get `[router] drain_timeout_s`); a second one
    (Ctrl-C, or another `kill`) quits at once: the messages of the turns cut off are saved and
    answered at the next start."""
    loop = asyncio.get_running_loop()

    def interrupted() -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # out of the event loop: `main` exits 130
        stop.set()

    loop.add_signal_handler(signal.SIGINT, interrupted)
    loop.add_signal_handler(signal.SIGTERM, interrupted)


async def cmd_run(args: argparse.Namespace, config: Config) -> int:
    from gateway.app.app import App
    from gateway.app.channels import build_channels, channel_statuses
    from vault.lock import in_use, one_run

    statuses = channel_statuses(config)
    for status in statuses:
        if not status.enabled:
            log.warning("channel %s is off: %s", status.name, status.reason)
    if not any(s.enabled for s in statuses):
        log.warning("no channel is running; serving until SIGINT/SIGTERM (try `iris chat`)")
    stop = asyncio.Event()
    _install_stop_signals(stop)
    vault = config.settings.vault
    # `iris db restore` refuses while this is held; on PostgreSQL replicas take nothing.
    with in_use(vault.path, vault.url), one_run(vault.path, vault.url):
        async with App(config=config, channels=build_channels(config)) as app:
            log.info("iris is running (vault %s)", "PostgreSQL" if vault.url else vault.path)
            await app.serve(stop)
    log.info("iris stopped")
    return 0


async def cmd_chat(args: argparse.Namespace, config: Config) -> int:
    from channels.console import ConsoleChannel
    from gateway.app.app import App
    from vault.lock import in_use, one_chat

    console = ConsoleChannel()
    stop = asyncio.Event()
    _install_stop_signals(stop)

    async def stop_at_eof() -> None:
        await console.done.wait()
        stop.set()

    v = config.settings.vault
    with in_use(v.path, v.url):
        async with (
            one_chat(v.path, v.url),
            App(config=config, channels=[console], background=[stop_at_eof],
                serve_http=False) as app,
        ):  # fmt: skip
            await app.serve(stop)
    return 0


async def cmd_analyze(args: argparse.Namespace, config: Config) -> int:
    from gateway.analyzer.batch import run_batch
    from gateway.analyzer.semantic import SemanticSide
    from gateway.analyzer.watcher import params_of
    from gateway.knowledge.local_embedder import open_local_embedder

    s = config.settings.analyzer
    try:
        text = await asyncio.to_thread(Path(args.file).read_text, encoding="utf-8")
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        print(f"error: cannot read {args.file}: {reason}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print(f"error: cannot read {args.file}: not UTF-8 text", file=sys.stderr)
        return 2
    lines = text.split("\n")
    # The same model selection as a live chat: embeddings when the extra is installed and
    # `[analyzer] semantic` is on, otherwise the lexical rules.
    embedder = open_local_embedder(config.settings.context.embed_threads) if s.semantic else None
    semantic = SemanticSide(embedder)
    params = params_of(s, semantic.model)
    try:
        if args.confirm:
            return await _analyze_confirmed(lines, config, params, semantic)
        return await run_batch(
            lines, sys.stdout, sys.stderr, params=params, window=s.recent_messages,
            semantic=semantic,
        )  # fmt: skip
    except BrokenPipeError:  # `iris analyze … | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


async def _analyze_confirmed(
    lines: list[str], config: Config, params: Params, semantic: SemanticSide
) -> int:
    from gateway.agent.anthropic_llm import AnthropicLLM
    from gateway.analyzer.batch import run_batch
    from gateway.analyzer.confirm import Confirmer, confirmation_model

    s, llm = config.settings.analyzer, config.settings.llm
    model = confirmation_model(s.confirm_model)
    if model is None:
        print(
            "error: --confirm needs [analyzer] confirm_model (as a live chat does)", file=sys.stderr
        )
        return 2
    key = config.secrets.get("ANTHROPIC_API_KEY")
    if key is None:
        print("error: --confirm needs ANTHROPIC_API_KEY", file=sys.stderr)
        return 2
    confirmer = Confirmer(model=model, timeout_s=s.confirm_timeout_s)
    async with AnthropicLLM(
        api_key=key,
        model=model,
        base_url=llm.base_url,
        timeout_s=llm.timeout_s,
        deadline_s=llm.turn_deadline_seconds,
        max_retries=0,
    ) as adapter:
        return await run_batch(
            lines,
            sys.stdout,
            sys.stderr,
            params=params,
            window=s.recent_messages,
            confirm=(confirmer, adapter.complete),
            semantic=semantic,
        )


def parse_since(text: str, now_ms: int) -> int:
    """`24h`, `7d`, `30m` back from now, or an ISO date/time (UTC unless it has an offset)."""
    units = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}
    number, unit = text[:-1], text[-1:].lower()
    if unit in units and number.isascii() and number.isdigit():
        return max(0, now_ms - int(number) * units[unit])  # longer ago than 1970: everything
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--since: expected 24h, 7d or a date like 2026-11-01, not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


async def cmd_audit(args: argparse.Namespace, config: Config) -> int:
    from gateway.admin.chat import audited, when
    from gateway.core.clock import SystemClock
    from vault.audit import AuditLog
    from vault.backend import vault_for
    from vault.migrations import migrate

    since = parse_since(args.since, SystemClock().now_ms())
    v = config.settings.vault
    if not v.url and not v.path.exists():  # reading creates no vault
        print(f"no vault at {v.path} yet: nothing was audited")
        return 0
    async with vault_for(v.path, v.url) as vault:
        await migrate(vault)
        entries = await AuditLog(vault).recent(since_ms=since, limit=args.limit)
    for e in reversed(entries):
        result = f" ({e.result})" if e.result else ""
        what = audited(e.action, e.args)
        line = f"{when(e.at_ms)}  {e.actor} via {e.via}: {what} -> {e.outcome}{result}"
        print(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", line))  # as text, not acted on
    if not entries:
        print("no admin actions in that period")
    return 0


async def cmd_simulate(args: argparse.Namespace, config: Config) -> int:
    from proactive.sim_cli import run_simulation

    html_path: Path | None = args.html
    if html_path is not None and not html_path.parent.is_dir():
        print(f"error: directory {html_path.parent} does not exist", file=sys.stderr)
        return 2
    return await run_simulation(
        config.settings.proactive, users=args.users, days=args.days, seed=args.seed,
        global_daily=args.global_daily, workers=args.workers, as_json=args.json,
        html_path=html_path, out=sys.stdout, err=sys.stderr,
    )  # fmt: skip


# What came in through the API or a chat may hold control characters: a terminal would act on
# them (move the cursor, clear the screen), so `iris audit` shows them escaped.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # argparse would name this function in its message
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive whole number")
    return value


def package_version() -> str:
    try:
        return version("iris-gateway")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="path to config.toml (default: ./config.toml if present; the .env beside it "
        "is read too)",
    )
    parser = argparse.ArgumentParser(
        prog="iris",
        description="Iris chat assistant gateway",
        parents=[common],
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"iris {package_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_init.add_parsers(sub, common)
    add_command(sub, "run", "start every enabled channel", parents=[common], runner=cmd_run)
    add_command(sub, "chat", "chat in this terminal", parents=[common], runner=cmd_chat, quiet=True)
    cli_doctor.add_parsers(sub, common)
    p = add_command(
        sub,
        "analyze",
        "judge conversations in a JSONL file (context analyzer)",
        parents=[common],
        runner=cmd_analyze,
        quiet=True,
    )
    p.add_argument("file", help='JSONL: one {"id", "messages": [...]} per line')
    p.add_argument("--confirm", action="store_true", help="confirm topic shifts with the model")
    p = add_command(
        sub, "audit", "print the admin audit log", parents=[common], runner=cmd_audit, quiet=True
    )
    p.add_argument(
        "--since",
        default="7d",
        help="how far back: a duration like 24h or 7d, or a date like 2026-11-01",
    )
    p.add_argument("--limit", type=_positive, default=200, help="most entries printed")
    p = add_command(
        sub,
        "simulate",
        "run the proactive engine on a synthetic population",
        parents=[common],
        runner=cmd_simulate,
        quiet=True,
    )
    p.add_argument("--users", type=_positive, default=200, help="simulated users")
    p.add_argument("--days", type=_positive, default=7, help="simulated days")
    p.add_argument("--seed", type=int, default=1, help="random seed (same seed, same run)")
    p.add_argument(
        "--global-daily",
        type=_positive,
        help="global quota per UTC day (default: the configured one, raised to per_user_daily "
        "x users so a large synthetic run does not just measure the cap)",
    )
    p.add_argument(
        "--workers",
        type=_positive,
        default=os.cpu_count() or 1,
        help="processes, each simulating a share of the users (one per CPU by default; 1: all "
        "in this process); the report is the same for any number. A global quota the users "
        "could reach couples them: such a run uses one process",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--html", type=Path, help="also write a self-contained HTML report (default: none)"
    )
    cli_db.add_parsers(sub, common)
    cli_deploy.add_parsers(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # a bare `iris`: what it can do
        parser.print_help()
        return 2
    args = parser.parse_args(argv)
    # Everything Iris writes — the vault and its -wal/-shm files, backups, the files it set
    # aside at a restore, `.env` — holds conversations or secrets: readable by its owner only.
    umask = os.umask(0o077)
    os.umask(umask | 0o077)
    try:
        return _main(args)
    finally:
        os.umask(umask)  # for a caller in the same process (the tests)


def _main(args: argparse.Namespace) -> int:
    if hasattr(args, "plain"):  # `iris init`: it writes the configuration, so none is loaded
        return int(args.plain(args))
    try:
        config = load_config(
            getattr(args, "config", None), secrets=getattr(args, "needs_secrets", True)
        )
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return 2
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    setup_logging(config.settings.log.level, quiet=getattr(args, "quiet", False))
    runner: Runner = args.runner
    try:
        return asyncio.run(runner(args, config))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # found only when used, e.g. a vault URL that does not connect
        for problem in exc.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return 2
    except FatalChannelError as exc:  # the configuration can never work: as a config error,
        print(f"fatal: {exc}", file=sys.stderr)  # so a service manager does not restart it
        return 2
    except SchemaTooNew as exc:  # a replica older than the schema: refuse, never run on it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except IrisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader left (`iris slack manifest | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush
        return 141  # as a process ended by SIGPIPE
