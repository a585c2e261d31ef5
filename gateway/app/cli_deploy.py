"""`iris slack manifest` and `iris service install`: what running Iris for real needs around it.

The Slack manifest comes from `channels/slack/manifest.py` with this configuration's command
and mode. The systemd unit runs `iris run` with this interpreter and config: restarted on
failure but not after a configuration error (exit code 2, which a restart cannot fix), the
`.env` beside the config as its environment file, and a stop timeout longer than the router's
drain deadline, so systemd never kills Iris while it finishes the turns in flight.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import re
import sys
from pathlib import Path

from gateway.app.cli_common import Subparsers, UsageError, add_command
from gateway.app.config import Config
from gateway.app.config_sources import env_file_for

# After the drain deadline: cancelling background work and closing the vault.
STOP_MARGIN_S = 15


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    slack = sub.add_parser("slack", help="Slack app setup", description="Slack app setup")
    commands = slack.add_subparsers(dest="slack_command", required=True, metavar="COMMAND")
    p = add_command(
        commands,
        "manifest",
        "print a Slack app manifest (JSON) matching the config",
        parents=[common],
        runner=slack_manifest,
        quiet=True,
        description="Print the app manifest to paste into api.slack.com/apps -> Create New App "
        "-> From an app manifest: bot scopes, events, the slash command, interactivity and "
        "Socket Mode as this configuration uses them.",
    )
    p.set_defaults(needs_secrets=False)  # the first setup step: the tokens come from the app
    p.add_argument(
        "--mode",
        choices=["socket", "http"],
        help="socket (no public URL) or http (default: [slack] mode of the config)",
    )
    p.add_argument(
        "--url", help="public https:// base URL of Iris, needed in http mode (Slack posts to "
        "<url>/slack/events; default: none)"
    )  # fmt: skip
    p.add_argument("--name", default="Iris", type=app_name,
                   help="the app's and the bot's display name")  # fmt: skip
    service = sub.add_parser(
        "service",
        help="run Iris as a service",
        description="Run Iris as a service: `iris service install` writes a systemd unit that "
        "runs `iris run`, restarts it on failure and gives it time to stop cleanly.",
    )
    commands = service.add_subparsers(dest="service_command", required=True, metavar="COMMAND")
    p = add_command(
        commands,
        "install",
        "write a systemd unit that runs `iris run`",
        parents=[common],
        runner=service_install,
        quiet=True,
    )
    p.add_argument(
        "--user", action="store_true", help="a user unit (~/.config/systemd/user), no root needed"
    )
    p.add_argument("--print", action="store_true", help="print the unit instead of writing it")
    p.add_argument("--name", default="iris", type=unit_name,
                   help="the unit's name (<name>.service)")  # fmt: skip
    p.add_argument("--force", action="store_true", help="replace a different existing unit")


def app_name(value: str) -> str:
    """A Slack app's display name: Slack refuses an empty one or one over 35 characters."""
    if not value.strip() or len(value.strip()) > 35:
        raise argparse.ArgumentTypeError("a Slack app's name is 1 to 35 characters")
    return value.strip()


def unit_name(value: str) -> str:
    """A systemd unit name: letters, digits and `:-_.@\\`, no path (`../x` would write the
    unit outside the unit directory)."""
    if not re.fullmatch(r"[A-Za-z0-9:_.@\\-]{1,200}", value) or value in (".", ".."):
        raise argparse.ArgumentTypeError(
            "a unit name is letters, digits and - _ . @ : only, like iris or iris-staging"
        )
    return value


async def slack_manifest(args: argparse.Namespace, config: Config) -> int:
    from channels.slack.manifest import manifest

    mode = args.mode or config.settings.slack.mode
    if mode == "http" and not args.url:
        raise UsageError("--url: http mode needs the public https:// URL Slack can reach Iris at")
    try:
        built = manifest(name=args.name, command=config.settings.slack.command, mode=mode,
                         url=args.url or "")  # fmt: skip
    except ValueError as exc:
        raise UsageError(f"--url: {exc}") from None
    print(json.dumps(built, indent=2))
    return 0


def unit_text(config: Config, *, user: bool) -> str:
    workdir = (config.source.parent if config.source else Path.cwd()).resolve()
    command = [sys.executable, "-m", "gateway.app", "run"]
    if config.source is not None:
        command += ["--config", str(config.source.resolve())]
    stop_s = math.ceil(config.settings.router.drain_timeout_s) + STOP_MARGIN_S
    account = "" if user else f"User={run_as}\n" if (run_as := system_account()) else ""
    # A private /tmp would hide a working directory under it.
    private_tmp = "" if _under_tmp(workdir) else "PrivateTmp=yes\n"
    return (
        "[Unit]\n"
        "Description=Iris chat assistant gateway\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=exec\n"
        f"{account}"
        f"WorkingDirectory={workdir}\n"
        f"EnvironmentFile=-{env_file_for(config.source).resolve()}\n"
        f"ExecStart={' '.join(command)}\n"
        "# The vault holds every conversation: files Iris makes are its user's alone.\n"
        "UMask=0077\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "# Exit code 2 is a configuration error: fix it, then `systemctl restart`.\n"
        "RestartPreventExitStatus=2\n"
        "KillSignal=SIGTERM\n"
        f"# [router] drain_timeout_s + {STOP_MARGIN_S} s to finish turns in flight and close.\n"
        f"TimeoutStopSec={stop_s}\n"
        "NoNewPrivileges=yes\n"
        f"{private_tmp}"
        "\n"
        "[Install]\n"
        f"WantedBy={'default.target' if user else 'multi-user.target'}\n"
    )


def system_account() -> str | None:
    """Whom a system unit runs Iris as: whoever installs it, or under sudo whoever ran sudo;
    None for root itself (no `User=`: the unit then runs as root, and the install says so)."""
    name = getpass.getuser() if os.geteuid() != 0 else os.environ.get("SUDO_USER", "")
    return name if name and name != "root" else None


def _under_tmp(path: Path) -> bool:
    return any(path.is_relative_to(tmp) for tmp in (Path("/tmp"), Path("/var/tmp")))


def unit_dir(user: bool) -> Path:
    if not user:
        return Path("/etc/systemd/system")
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


async def service_install(args: argparse.Namespace, config: Config) -> int:
    text = unit_text(config, user=args.user)
    if args.print:
        print(text, end="")
        return 0
    path = unit_dir(args.user) / f"{args.name}.service"
    if path.exists() and path.read_text(encoding="utf-8") != text and not args.force:
        raise UsageError(f"{path} exists and differs; see it with --print, replace it with --force")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        hint = " (try --user, or run as root)" if not args.user else ""
        raise UsageError(f"cannot write {path}: {exc.strerror}{hint}") from None
    systemctl = "systemctl --user" if args.user else "systemctl"
    print(f"wrote {path}")
    if not args.user and system_account() is None:
        print("note: the unit runs Iris as root; add User= with an account of its own (or run "
              "this with sudo from that account)")  # fmt: skip
    print(f"next: {systemctl} daemon-reload && {systemctl} enable --now {args.name}")
    if args.user:
        print("      (and `loginctl enable-linger` to keep it running after you log out)")
    return 0
