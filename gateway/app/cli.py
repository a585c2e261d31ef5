"""The `iris` command line: run, chat, doctor, analyze, simulate, db migrate, db backup.

Exit codes: 0 success, 1 a check or command failed, 2 bad configuration or usage (before
anything starts). Errors are one line per problem; tracebacks only for bugs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.app.config import Config, load_config
from gateway.core.errors import ConfigError, FatalChannelError, IrisError, VaultError

if TYPE_CHECKING:
    from gateway.analyzer.detect import Params

log = logging.getLogger("iris")

Runner = Callable[[argparse.Namespace, Config], Coroutine[Any, Any, int]]


def _setup_logging(level: str, *, quiet: bool = False) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("httpx", "httpx2", "telegram", "slack_bolt", "slack_sdk", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def cmd_run(args: argparse.Namespace, config: Config) -> int:
    from gateway.app.app import App
    from gateway.app.channels import build_channels, channel_statuses

    statuses = channel_statuses(config)
    for status in statuses:
        if not status.enabled:
            log.warning("channel %s is off: %s", status.name, status.reason)
    if not any(s.enabled for s in statuses):
        log.warning("no channel is running; serving until SIGINT/SIGTERM (try `iris chat`)")
    stop = asyncio.Event()
    _install_stop_signals(stop)
    async with App(config=config, channels=build_channels(config)) as app:
        log.info("iris is running (vault %s)", config.settings.vault.path)
        await app.serve(stop)
    log.info("iris stopped")
    return 0


async def cmd_chat(args: argparse.Namespace, config: Config) -> int:
    from channels.console import ConsoleChannel
    from gateway.app.app import App

    console = ConsoleChannel()
    stop = asyncio.Event()
    _install_stop_signals(stop)

    async def stop_at_eof() -> None:
        await console.done.wait()
        stop.set()

    async with App(config=config, channels=[console], background=[stop_at_eof]) as app:
        await app.serve(stop)
    return 0


async def cmd_doctor(args: argparse.Namespace, config: Config) -> int:
    from gateway.app.channels import channel_statuses
    from vault.db import Vault
    from vault.migrations import MIGRATIONS

    ok = True
    print(f"config: ok ({config.source or 'built-in defaults'})")
    try:
        async with Vault(config.settings.vault.path) as vault:
            version = await vault.user_version()
        pending = len(MIGRATIONS) - version
        state = "up to date" if pending == 0 else f"{pending} migration(s) pending"
        if pending < 0:
            state, ok = "newer than this Iris", False
        print(f"vault: {config.settings.vault.path} (schema {version}, {state})")
    except VaultError as exc:
        ok = False
        print(f"vault: ERROR {exc}")
    missing = config.secrets.missing()
    print("secrets missing: " + (", ".join(missing) if missing else "none"))
    if "ANTHROPIC_API_KEY" in missing:
        print("model: not configured (chat messages get a 'no model' notice)")
    for status in channel_statuses(config):
        print(f"channel {status.name}: {'on' if status.enabled else 'off'} — {status.reason}")
    if args.online:
        ok = await _check_model_online(config) and ok
        ok = await _check_channels_online(config) and ok
    return 0 if ok else 1


async def _check_channels_online(config: Config) -> bool:
    from gateway.app.channels import check_channels_online

    results = await check_channels_online(config)
    for name, good, said in results:
        print(f"channel {name} online: {'ok (' + said + ')' if good else 'FAILED — ' + said}")
    return all(good for _, good, _ in results)


async def _check_model_online(config: Config) -> bool:
    from gateway.agent.anthropic_llm import AnthropicLLM
    from gateway.core.errors import ModelError
    from gateway.core.llm import LLMMessage, LLMRequest

    key = config.secrets.get("ANTHROPIC_API_KEY")
    if key is None:
        print("model online: skipped (ANTHROPIC_API_KEY not set)")
        return False
    s = config.settings.llm
    async with AnthropicLLM(
        api_key=key,
        model=s.model,
        base_url=s.base_url,
        timeout_s=min(s.timeout_s, 30),
        max_retries=0,
    ) as llm:
        try:
            await llm.complete(
                LLMRequest(
                    system_stable="Reply with OK.",
                    messages=(LLMMessage.user("ping"),),
                    max_tokens=16,
                    purpose="doctor",
                )
            )
        except ModelError as exc:
            print(f"model online: FAILED — {exc}")
            return False
    print(f"model online: ok ({s.model})")
    return True


async def cmd_db_migrate(args: argparse.Namespace, config: Config) -> int:
    from vault.db import Vault
    from vault.migrations import migrate

    async with Vault(config.settings.vault.path) as vault:
        applied = await migrate(vault)
        version = await vault.user_version()
    print(f"applied: {', '.join(applied) if applied else 'nothing'}; schema version {version}")
    return 0


async def cmd_db_backup(args: argparse.Namespace, config: Config) -> int:
    from vault.db import Vault

    async with Vault(config.settings.vault.path) as vault:
        await vault.backup(Path(args.path))
    print(f"backup written to {args.path}")
    return 0


async def cmd_analyze(args: argparse.Namespace, config: Config) -> int:
    from gateway.analyzer.batch import run_batch
    from gateway.analyzer.detect import Params

    s = config.settings.analyzer
    params = Params(threshold=s.topic_shift_threshold, min_keywords=s.min_keywords)
    try:
        text = await asyncio.to_thread(Path(args.file).read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    lines = text.split("\n")
    try:
        if args.confirm:
            return await _analyze_confirmed(lines, config, params)
        return await run_batch(
            lines, sys.stdout, sys.stderr, params=params, window=s.recent_messages
        )
    except BrokenPipeError:  # `iris analyze … | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


async def _analyze_confirmed(lines: list[str], config: Config, params: Params) -> int:
    from gateway.agent.anthropic_llm import AnthropicLLM
    from gateway.analyzer.batch import run_batch
    from gateway.analyzer.confirm import Confirmer

    key = config.secrets.get("ANTHROPIC_API_KEY")
    if key is None:
        print("error: --confirm needs ANTHROPIC_API_KEY", file=sys.stderr)
        return 2
    s, llm = config.settings.analyzer, config.settings.llm
    model = s.confirm_model or llm.model
    confirmer = Confirmer(model=model, timeout_s=s.confirm_timeout_s)
    async with AnthropicLLM(
        api_key=key, model=model, base_url=llm.base_url, timeout_s=llm.timeout_s, max_retries=0
    ) as adapter:
        return await run_batch(
            lines,
            sys.stdout,
            sys.stderr,
            params=params,
            window=s.recent_messages,
            confirm=(confirmer, adapter.complete),
        )


def parse_since(text: str, now_ms: int) -> int:
    """`24h`, `7d`, `30m` back from now, or an ISO date/time (UTC unless it has an offset)."""
    units = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}
    number, unit = text[:-1], text[-1:].lower()
    if unit in units and number.isdigit():
        return now_ms - int(number) * units[unit]
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
    from gateway.admin.chat import when
    from gateway.core.clock import SystemClock
    from vault.audit import AuditLog
    from vault.db import Vault
    from vault.migrations import migrate

    since = parse_since(args.since, SystemClock().now_ms())
    async with Vault(config.settings.vault.path) as vault:
        await migrate(vault)
        entries = await AuditLog(vault).recent(since_ms=since, limit=args.limit)
    for e in reversed(entries):
        result = f" ({e.result})" if e.result else ""
        print(f"{when(e.at_ms)}  {e.actor} via {e.via}: {e.action} {e.args} -> {e.outcome}{result}")
    if not entries:
        print("no admin actions in that period")
    return 0


class UsageError(IrisError):
    """A bad command-line argument (exit code 2)."""


async def cmd_simulate(args: argparse.Namespace, config: Config) -> int:
    import json

    from proactive.engine import EngineConfig
    from proactive.policy import PolicyConfig
    from proactive.sim_report import render_html, render_text
    from proactive.simulate import SimConfig, simulate

    html_path: Path | None = args.html
    if html_path is not None and not html_path.parent.is_dir():
        print(f"error: directory {html_path.parent} does not exist", file=sys.stderr)
        return 2
    for name in ("proactive", "gateway.turns.delivery"):  # scripted malformed answers and failures
        logging.getLogger(name).setLevel(logging.ERROR)
    section = config.settings.proactive
    report = await simulate(
        SimConfig(users=args.users, days=args.days, seed=args.seed),
        PolicyConfig.from_section(section),
        EngineConfig.from_section(section),
    )
    if html_path is not None:
        await asyncio.to_thread(html_path.write_text, render_html(report), encoding="utf-8")
    print(json.dumps(report, sort_keys=True) if args.json else render_text(report))
    broken = ("quiet_hour_violations", "quota_violations", "duplicates", "non_terminal")
    return 1 if any(report[k] for k in broken) else 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive whole number")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="path to config.toml (default: ./config.toml if present)",
    )
    parser = argparse.ArgumentParser(
        prog="iris", description="Iris chat assistant gateway", parents=[common]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", parents=[common], help="start every enabled channel")
    p.set_defaults(runner=cmd_run)
    p = sub.add_parser("chat", parents=[common], help="chat in this terminal")
    p.set_defaults(runner=cmd_chat, quiet=True)
    p = sub.add_parser("doctor", parents=[common], help="check config, vault and secrets")
    p.add_argument("--online", action="store_true", help="also call the model API")
    p.set_defaults(runner=cmd_doctor)
    p = sub.add_parser(
        "analyze", parents=[common], help="judge conversations in a JSONL file (context analyzer)"
    )
    p.add_argument("file", help='JSONL: one {"id", "messages": [...]} per line')
    p.add_argument("--confirm", action="store_true", help="confirm topic shifts with the model")
    p.set_defaults(runner=cmd_analyze, quiet=True)
    p = sub.add_parser("audit", parents=[common], help="print the admin audit log")
    p.add_argument(
        "--since",
        default="7d",
        help="how far back: a duration like 24h or 7d, or a date like 2026-11-01",
    )
    p.add_argument("--limit", type=int, default=200)
    p.set_defaults(runner=cmd_audit, quiet=True)
    p = sub.add_parser(
        "simulate", parents=[common], help="run the proactive engine on a synthetic population"
    )
    p.add_argument("--users", type=_positive, default=200)
    p.add_argument("--days", type=_positive, default=7)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--html", type=Path, help="also write a self-contained HTML report")
    p.set_defaults(runner=cmd_simulate, quiet=True)
    db = sub.add_parser("db", help="vault maintenance").add_subparsers(
        dest="db_command", required=True
    )
    p = db.add_parser("migrate", parents=[common], help="apply pending migrations")
    p.set_defaults(runner=cmd_db_migrate)
    p = db.add_parser("backup", parents=[common], help="consistent online backup to PATH")
    p.add_argument("path")
    p.set_defaults(runner=cmd_db_backup)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(getattr(args, "config", None))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return 2
    _setup_logging(config.settings.log.level, quiet=getattr(args, "quiet", False))
    runner: Runner = args.runner
    try:
        return asyncio.run(runner(args, config))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FatalChannelError as exc:
        print(f"fatal: {exc}", file=sys.stderr)
        return 1
    except IrisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
