"""`iris init`: set Iris up by answering questions (or with flags, `--non-interactive`).

It asks which channels to run and how, their tokens, the model key and id, admins, allowed
users and the default time zone; checks each token online when it can (Telegram `getMe`, Slack
`auth.test`, a 16-token model request — `--no-check` skips them, each has a time limit);
writes `config.toml` (no secrets) and `.env` beside it (the secrets, mode 0600); validates the
result exactly as `iris run` will load it; and prints the next command.

Re-running edits: every question starts from what the files say now, only the keys it sets
change (`setup_files.py` edits lines in place, comments survive), and interactively nothing is
written before the person confirms the listed changes. A token a platform rejects is asked for
again (interactive) or stops the run with nothing written (non-interactive); a service that
cannot be reached is only a warning, since the token may be fine.
Size: one function per question group; the questions read best together.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tomllib
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from gateway.app import setup_checks as checks
from gateway.app.cli_common import Subparsers, UsageError, add_command
from gateway.app.config import DEFAULT_CONFIG_FILE, load_config
from gateway.app.config_sources import env_file_for, read_env_file
from gateway.app.online import Check, check_model, check_slack, check_telegram
from gateway.app.prompt import Cancelled, Prompter, masked
from gateway.app.setup_files import (
    Value,
    set_env,
    set_toml,
    toml_value,
    write_private,
    write_text,
)
from gateway.core.errors import ConfigError

HEADER = """# Iris configuration, written by `iris init`. Edit it freely: re-running init keeps
# your edits. Every key with its default is documented in config.toml.example. Secrets are
# not kept here but in .env beside this file (mode 600).
"""


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        sub,
        "init",
        "set up config.toml and .env by answering questions",
        parents=[common],
        plain=run_init,
        description="Ask for channels, tokens, model, admins, allowed users and time zone; "
        "check the tokens online; write config.toml and .env (secrets, mode 600). Re-running "
        "edits the files. Each flag below answers its question; a question without one starts "
        "from its current value: what the files say now, else Iris's default. Secrets can "
        "also come from the "
        "environment (TELEGRAM_BOT_TOKEN, ...), which keeps them out of the shell history.",
    )
    p.add_argument(
        "--non-interactive", action="store_true", help="ask nothing: flags, else current values"
    )
    p.add_argument("--channels", help="comma-separated: telegram, slack, or none")
    p.add_argument("--telegram-mode", choices=["polling", "webhook"], help="how Telegram delivers")
    p.add_argument("--telegram-token", help="bot token from @BotFather")
    p.add_argument("--telegram-webhook-url", help="public https:// URL (webhook mode)")
    p.add_argument("--slack-mode", choices=["socket", "http"], help="Socket Mode or HTTP events")
    p.add_argument("--slack-bot-token", help="xoxb-… bot token")
    p.add_argument("--slack-app-token", help="xapp-… app-level token (socket mode)")
    p.add_argument("--slack-signing-secret", help="signing secret (http mode)")
    p.add_argument("--anthropic-api-key", help="model API key (empty: run without a model)")
    p.add_argument("--model", help="model id")
    p.add_argument("--admins", help="comma-separated ids like telegram:12345 (empty: none)")
    p.add_argument("--allow", help="comma-separated ids, or telegram:* for everyone on it")
    p.add_argument("--timezone", help="default IANA time zone for users, like Europe/Berlin")
    p.add_argument("--no-check", action="store_true", help="do not check tokens online")
    p.add_argument(
        "--check-timeout", type=float, default=10.0, help="seconds each online check may take"
    )
    for action in p._actions:  # the flags that answer a question
        if action.default is None and action.option_strings and action.help:
            action.help += " (default: its current value)"


# --- the run ---------------------------------------------------------------------------------


class Setup:
    """The answers collected so far and what they change."""

    def __init__(self, args: argparse.Namespace, prompter: Prompter, path: Path) -> None:
        self.args = args
        self.ask = prompter
        self.path = path
        self.env_path = env_file_for(path)
        self.text = path.read_text(encoding="utf-8") if path.exists() else HEADER
        try:
            self.doc: dict[str, Any] = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{path}: invalid TOML ({exc}); fix it or move it away") from None
        self.env_text = self.env_path.read_text(encoding="utf-8") if self.env_path.exists() else ""
        self.env_now, _ = read_env_file(self.env_path)
        self.toml: dict[tuple[str, str], Value] = {}
        self.secrets: dict[str, str] = {}

    def now(self, section: str, key: str, default: Any = "") -> Any:
        return self.doc.get(section, {}).get(key, default)

    def effective(self, section: str, key: str, default: str) -> str:
        """What `iris run` will use: an environment override, else the file, else default."""
        override = os.environ.get(f"IRIS_{section.upper()}__{key.upper()}")
        return override if override is not None else str(self.now(section, key, default))

    def secret_now(self, name: str) -> str:
        return os.environ.get(name) or self.env_now.get(name, "")

    def set(self, section: str, key: str, value: Value) -> None:
        if self.now(section, key, None) != value:
            self.toml[(section, key)] = value

    def set_secret(self, name: str, value: str) -> None:
        if value and self.env_now.get(name) != value:
            self.secrets[name] = value

    def online(self, what: str, check: Coroutine[Any, Any, Check]) -> bool:
        """Run one online check; False only when the service rejected the credentials."""
        result = asyncio.run(check)
        if result.ok:
            self.ask.say(f"  {result.line(what)}")
            return True
        if result.unreachable:
            print(f"warning: {result.line(what)}; not verified", flush=True)
            return True
        if not self.ask.interactive:
            raise UsageError(result.line(what))
        self.ask.say(f"  {result.line(what)}")
        return False

    def setting(
        self, question: str, flag: str, at: tuple[str, str], default: str, validate: Any
    ) -> str:
        """Ask for one config value (the flag's value when given, else the file's, else
        `default`, is what Enter keeps) and record it at `at` = (section, key)."""
        given = getattr(self.args, flag.removeprefix("--").replace("-", "_"))
        value: str = self.ask.ask(
            question, flag=flag, given=given, current=str(self.now(*at, default)),
            validate=validate,
        )  # fmt: skip
        self.set(*at, value)
        return value

    def people(self, question: str, flag: str, key: str, validate: Any) -> None:
        """Ask for a comma-separated list of ids and record it as `[auth] key`."""
        given = getattr(self.args, flag.removeprefix("--"))
        answer = self.ask.ask(
            question, flag=flag, given=given,
            current=",".join(self.now("auth", key, [])) or "none", validate=validate,
        )  # fmt: skip
        self.set("auth", key, checks.split(answer))

    def secret(self, question: str, flag: str, name: str, validate: Any) -> str:
        given = getattr(self.args, flag.removeprefix("--").replace("-", "_"))
        value: str = self.ask.ask(
            question,
            flag=flag,
            given=given,
            current=self.secret_now(name),
            validate=validate,
            secret=True,
        )
        if not value and not self.ask.interactive:
            raise UsageError(f"{flag}: needed (or set {name} in the environment)")
        return value


def _ask_channels(s: Setup) -> list[str]:
    on = [c for c in checks.CHANNELS if s.now(c, "enabled", False)]
    s.ask.say("Iris always works in this terminal (`iris chat`). Chat platforms to run:")
    answer = s.ask.ask(
        "Channels (telegram, slack, both or none)",
        flag="--channels",
        given=s.args.channels,
        current=",".join(on) or "none",
        validate=checks.channel_list,
    )
    chosen = checks.split(answer.replace("both", "telegram,slack"))
    for channel in checks.CHANNELS:
        s.set(channel, "enabled", channel in chosen)
    return chosen


def _ask_telegram(s: Setup) -> None:
    s.ask.say("\nTelegram: talk to @BotFather, send /newbot, and paste the token it gives.")
    while True:
        token = s.secret(
            "Telegram bot token", "--telegram-token", "TELEGRAM_BOT_TOKEN", checks.telegram_token
        )
        if s.args.no_check:
            break
        base = s.effective("telegram", "base_url", "https://api.telegram.org/bot")
        if s.online("telegram", check_telegram(token, base, s.args.check_timeout)):
            break
    s.set_secret("TELEGRAM_BOT_TOKEN", token)
    mode = s.setting(
        "Telegram mode (polling needs no public URL; webhook does)",
        "--telegram-mode", ("telegram", "mode"), "polling", checks.choice("polling", "webhook"),
    )  # fmt: skip
    if mode == "webhook":
        url = s.setting(
            "Public webhook URL (your reverse proxy to Iris's [http] port)",
            "--telegram-webhook-url", ("telegram", "webhook_url"), "", checks.https,
        )  # fmt: skip
        if not url:
            raise UsageError("--telegram-webhook-url: needed in webhook mode")
        s.set("http", "enabled", True)
        if not s.secret_now("TELEGRAM_WEBHOOK_SECRET"):
            s.set_secret("TELEGRAM_WEBHOOK_SECRET", secrets.token_urlsafe(32))


def _ask_slack(s: Setup) -> None:
    s.ask.say(
        "\nSlack: create the app from a manifest first — `iris slack manifest` prints it — then "
        "install it to your workspace and copy its tokens."
    )
    mode = s.setting(
        "Slack mode (socket needs no public URL; http does)",
        "--slack-mode", ("slack", "mode"), "socket", checks.choice("socket", "http"),
    )  # fmt: skip
    if mode == "http":
        s.set("http", "enabled", True)
    while True:
        bot = s.secret(
            "Slack bot token (OAuth & Permissions)",
            "--slack-bot-token",
            "SLACK_BOT_TOKEN",
            checks.prefixed("xoxb-", "a bot token"),
        )
        if mode == "socket":
            app_token = s.secret(
                "Slack app-level token (Basic Information, connections:write)",
                "--slack-app-token",
                "SLACK_APP_TOKEN",
                checks.prefixed("xapp-", "an app-level token"),
            )
            signing = None
        else:
            signing = s.secret(
                "Slack signing secret (Basic Information)",
                "--slack-signing-secret",
                "SLACK_SIGNING_SECRET",
                checks.present,
            )
            app_token = None
        if s.args.no_check:
            break
        api = s.effective("slack", "api_url", "https://slack.com/api/")
        check = check_slack(
            bot_token=bot,
            api_url=api,
            mode=mode,
            app_token=app_token,
            signing_secret=signing,
            timeout_s=s.args.check_timeout,
        )
        if s.online("slack", check):
            break
    s.set_secret("SLACK_BOT_TOKEN", bot)
    s.set_secret("SLACK_APP_TOKEN", app_token or "")
    s.set_secret("SLACK_SIGNING_SECRET", signing or "")


def _ask_model(s: Setup) -> None:
    s.ask.say(
        "\nThe model: an Anthropic API key (console.anthropic.com). Without one Iris runs, "
        "and chat messages get a 'no model configured' notice."
    )
    model = s.setting("Model id", "--model", ("llm", "model"), "claude-sonnet-5-5", checks.present)
    while True:
        key = s.ask.ask(
            "Anthropic API key (Enter to skip)",
            flag="--anthropic-api-key",
            given=s.args.anthropic_api_key,
            current=s.secret_now("ANTHROPIC_API_KEY"),
            validate=checks.optional_key,
            secret=True,
        )
        if not key or s.args.no_check:
            break
        base = s.effective("llm", "base_url", "")
        check = check_model(api_key=key, model=model, base_url=base, timeout_s=s.args.check_timeout)
        if s.online("model", check):
            break
    s.set_secret("ANTHROPIC_API_KEY", key)


def _ask_people(s: Setup) -> None:
    s.ask.say(
        "\nWho may use Iris. Ids are <channel>:<user id>; a stranger who writes to Iris is "
        "told theirs, with a pairing code an admin can approve: /admin allow CODE."
    )
    s.people("Admins (comma-separated, or none)", "--admins", "admins", checks.ids(wildcards=False))
    s.people(
        "Allowed users (comma-separated; telegram:* lets everyone on Telegram in; or none)",
        "--allow", "allow", checks.ids(wildcards=True),
    )  # fmt: skip
    s.setting(
        "Default time zone for users (they can set their own with /tz)",
        "--timezone", ("proactive", "default_timezone"), "UTC", checks.timezone,
    )  # fmt: skip


def _validate(s: Setup, config_text: str) -> list[str]:
    """Load the new files exactly as `iris run` will (env overrides included)."""
    staging = s.path.with_name(f".{s.path.name}.check")
    write_text(staging, config_text)
    try:
        env = {**s.env_now, **s.secrets, **os.environ}
        load_config(staging, env=env)
    except ConfigError as exc:
        return list(exc.problems)
    finally:
        staging.unlink(missing_ok=True)
    return []


def _summary(s: Setup) -> list[str]:
    lines = [f"  {sec}.{key} = {toml_value(value)}" for (sec, key), value in s.toml.items()]
    lines += [
        f"  {name} = {masked(value)} (in {s.env_path.name})" for name, value in s.secrets.items()
    ]
    return lines


def run_init(args: argparse.Namespace) -> int:
    path: Path = getattr(args, "config", None) or DEFAULT_CONFIG_FILE
    prompter = Prompter(interactive=not args.non_interactive)
    try:
        s = Setup(args, prompter, path)
        chosen = _ask_channels(s)
        if "telegram" in chosen:
            _ask_telegram(s)
        if "slack" in chosen:
            _ask_slack(s)
        _ask_model(s)
        _ask_people(s)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Cancelled, KeyboardInterrupt):
        print("\ninit cancelled; nothing was written")
        return 1
    return _finish(s, chosen)


def _finish(s: Setup, chosen: list[str]) -> int:
    config_text = set_toml(s.text, s.toml) if s.toml or not s.path.exists() else s.text
    problems = _validate(s, config_text)
    if problems:
        for problem in problems:
            print(f"config error: {problem}", file=sys.stderr)
        print("nothing was written", file=sys.stderr)
        return 2
    if not s.toml and not s.secrets and s.path.exists():
        print(f"{s.path} already says all that; nothing to change")
    else:
        s.ask.say("\nChanges:")
        for line in _summary(s):
            s.ask.say(line)
        existing = [p.name for p in (s.path, s.env_path) if p.exists()]
        where = f" (editing the existing {' and '.join(existing)})" if existing else ""
        if not s.ask.confirm(f"Write them{where}?", default=True):
            print("nothing was written")
            return 1
        if s.toml or not s.path.exists():
            write_text(s.path, config_text)
            print(f"wrote {s.path}")
        if s.secrets:
            write_private(s.env_path, set_env(s.env_text, s.secrets))
            print(f"wrote {s.env_path} (secrets, mode 600)")
    config = f" --config {s.path}" if s.path != DEFAULT_CONFIG_FILE else ""
    if "slack" in chosen:
        print(f"Slack app manifest: iris slack manifest{config}")
    if chosen:
        print(f"next: iris doctor --online{config} && iris run{config}")
    else:
        print(f"next: iris chat{config}")
    return 0
