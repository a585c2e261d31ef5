"""`iris doctor [--online]`: is this configuration ready to run?

Prints the config file in use, the vault's schema state, the secrets this configuration needs
(only those: a Telegram-only setup is not told about Slack tokens), and each channel's state.
`--online` also makes one harmless call to the model and to each enabled platform
(`gateway/app/online.py`). Exit code 1 when something needed is broken or missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from gateway.app.cli_common import Subparsers, add_command
from gateway.app.config import Config, secrets_needed
from gateway.app.config_sources import shared_mode
from gateway.core.errors import ConfigError, VaultError


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        sub, "doctor", "check config, vault, secrets and channels", parents=[common], runner=doctor
    )
    p.add_argument(
        "--online", action="store_true", help="also call the model and each enabled platform"
    )


async def doctor(args: argparse.Namespace, config: Config) -> int:
    from gateway.app.channels import channel_statuses
    from vault.backend import vault_for
    from vault.migrations import MIGRATIONS

    ok = True
    print(f"config: ok ({config.source or 'built-in defaults'})")
    vault_file = Path(config.settings.vault.path)
    if not config.settings.vault.url and not await asyncio.to_thread(vault_file.exists):
        # Checking must not leave an empty vault file behind; whether it can be made, it says.
        problem = await asyncio.to_thread(_cannot_create, vault_file)
        if problem is None:
            print(f"vault: {_where(config)} (not created yet: the first start makes it)")
        else:
            ok = False
            print(f"vault: ERROR {vault_file} cannot be created: {problem}")
    else:
        try:
            async with vault_for(config.settings.vault.path, config.settings.vault.url) as vault:
                version = await vault.user_version()
        except (VaultError, ConfigError) as exc:
            ok = False
            print(f"vault: ERROR {exc}")
        else:
            pending = len(MIGRATIONS) - version
            state = "up to date"
            if pending > 0:
                state = f"{pending} migration(s) pending, applied at the next start"
            if pending < 0:
                state, ok = "newer than this Iris", False
            print(f"vault: {_where(config)} (schema {version}, {state})")
            if not config.settings.vault.url and (shared := shared_mode(vault_file)):
                print(f"vault: WARNING other users have access to it (mode {shared}); run: "
                      f"chmod 600 {vault_file}*")  # fmt: skip
    for name, why in secrets_needed(config.settings):
        state = "set" if config.secrets.get(name) else "missing"
        print(f"secret {name}: {state} (for {why})")
    if config.secrets.get("ANTHROPIC_API_KEY") is None:
        print("model: not configured (chat messages get a 'no model' notice)")
    for status in channel_statuses(config):
        print(f"channel {status.name}: {'on' if status.enabled else 'off'} — {status.reason}")
    print(http_line(config))
    for line in limits_report(config):
        print(line)
    for line in documents_report(config):  # a warning only: the files may come later
        print(line)
    if args.online:
        ok = await _model_online(config) and ok
        ok = await _channels_online(config) and ok
    return 0 if ok else 1


def http_line(config: Config) -> str:
    """Whether the HTTP server runs, where, and whether it serves the admin API."""
    http = config.settings.http
    if not http.enabled:
        return "http: off ([http] enabled = true serves /healthz, webhooks and the admin API)"
    api = "on" if config.secrets.get("IRIS_API_TOKEN") else "off (set IRIS_API_TOKEN to turn it on)"
    return f"http: on, http://{http.host}:{http.port} — admin API {api}"


def limits_report(config: Config) -> list[str]:
    """What `[limits]` allows, in words, and a warning for caps that contradict each other."""
    from gateway.limits.notices import dollars

    lim = config.settings.limits

    def per(value: float, unit: str, off: str) -> str:
        return f"{dollars(value)} {unit}" if value else off

    parts = [
        "per user " + per(lim.user_usd_per_day, "a day", "no daily cap") + ", "
        + per(lim.user_usd_per_month, "a month", "no monthly cap"),
        "everyone " + per(lim.global_usd_per_day, "a day", "no daily cap"),
        f"{lim.user_tokens_per_day:,} tokens a day per user"
        if lim.user_tokens_per_day
        else "no token cap",
        f"{lim.user_messages_per_minute} messages a minute per user"
        if lim.user_messages_per_minute
        else "no message rate limit",
        "admins exempt" if lim.admins_exempt else "admins not exempt",
    ]  # fmt: skip
    lines = ["limits: " + "; ".join(parts)]
    if 0 < lim.user_usd_per_month < lim.user_usd_per_day:
        lines.append(
            f"limits: WARNING user_usd_per_day ({dollars(lim.user_usd_per_day)}) is above "
            f"user_usd_per_month ({dollars(lim.user_usd_per_month)}): the month's cap stops a "
            "user first"
        )
    return lines


def _where(config: Config) -> str:
    vault = config.settings.vault
    return "PostgreSQL ([vault] url)" if vault.url else str(vault.path)


def documents_report(config: Config) -> list[str]:
    """The documents the globs match, and each one the index would skip or index with a
    warning (read and parsed as the indexer does), named with the reason."""
    from gateway.knowledge.indexer import list_files, read_document, unmatched_globs
    from gateway.knowledge.parse import Skipped
    from gateway.knowledge.rules import PathRules

    context = config.settings.context
    globs = context.documents
    if not globs:
        return []
    base = config.source.parent if config.source else Path.cwd()
    files = list_files(base, globs)
    rules = PathRules(context.types, context.scopes)
    problems, skipped = [], 0
    for rel, st in sorted(files.items()):
        found = read_document(rel, st, rules, context)
        if isinstance(found, Skipped):
            skipped += 1
            problems.append(f"documents: WARNING {rel} will be skipped: {found.reason}")
        else:
            problems += [f"documents: WARNING {rel}: {w}" for w in found.warnings]
            if not found.version.chunks:
                problems.append(f"documents: WARNING {rel} is empty: nothing to inject")
    indexable = len(files) - skipped
    lines = [f"documents: {len(files)} file(s) matched in {base}, {indexable} indexable"]
    lines += [f"documents: WARNING '{g}' matches no file" for g in unmatched_globs(base, globs)]
    lines += problems
    if context.knowledge_tokens > context.max_tokens:  # part of the whole: it can never all fit
        lines.append(
            f"documents: WARNING context.knowledge_tokens ({context.knowledge_tokens}) is over "
            f"context.max_tokens ({context.max_tokens}), the whole request's budget"
        )
    return lines


async def _channels_online(config: Config) -> bool:
    from gateway.app.channels import check_channels_online

    results = await check_channels_online(config)
    for name, good, said in results:
        print(f"channel {name} online: {'ok (' + said + ')' if good else 'FAILED — ' + said}")
    return all(good for _, good, _ in results)


async def _model_online(config: Config) -> bool:
    from gateway.app.online import check_model

    key = config.secrets.get("ANTHROPIC_API_KEY")
    if key is None:
        print("model online: skipped (ANTHROPIC_API_KEY not set)")
        return False
    s = config.settings.llm
    result = await check_model(
        api_key=key, model=s.model, base_url=s.base_url, timeout_s=min(s.timeout_s, 30)
    )
    print(result.line("model online"))
    return result.ok


def _cannot_create(path: Path) -> str | None:
    """Why the first start could not create the vault file at `path` (None: it could): the
    nearest existing folder above it must be a writable directory."""
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None
