"""`iris slack manifest`, `iris service install`, `--version`/`--help`, and the container
files, as a person uses them: subprocesses in a fresh directory."""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import time
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.app import cli_deploy
from gateway.app.cli import build_parser
from tests.conftest import make_config
from tests.gateway.app.test_cli import iris

ROOT = Path(__file__).parents[3]


def test_slack_manifest_follows_the_config(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[slack]\ncommand = "/ask"\nmode = "http"\n')
    missing = iris(tmp_path, "slack", "manifest")
    assert missing.returncode == 2
    assert missing.stderr == "error: --url: http mode needs the public https:// URL Slack can " \
        "reach Iris at\n"  # fmt: skip
    insecure = iris(tmp_path, "slack", "manifest", "--url", "http://x")
    assert insecure.returncode == 2 and "https://" in insecure.stderr
    result = iris(tmp_path, "slack", "manifest", "--url", "https://iris.example.com")
    assert result.returncode == 0, result.stderr
    built = json.loads(result.stdout)
    assert built["features"]["slash_commands"][0]["command"] == "/ask"
    assert built["settings"]["event_subscriptions"]["request_url"] == (
        "https://iris.example.com/slack/events"
    )
    assert built["settings"]["socket_mode_enabled"] is False
    socket = json.loads(iris(tmp_path, "slack", "manifest", "--mode", "socket").stdout)
    assert socket["settings"]["socket_mode_enabled"] is True
    assert "chat:write" in socket["oauth_config"]["scopes"]["bot"]
    # The README's first step, with Slack already enabled and no token yet: it still prints.
    (tmp_path / "config.toml").write_text('[slack]\nenabled = true\nmode = "socket"\n')
    early = iris(tmp_path, "slack", "manifest")
    assert early.returncode == 0, early.stderr
    assert json.loads(early.stdout)["settings"]["socket_mode_enabled"] is True
    assert iris(tmp_path, "doctor").returncode == 2  # everything else still needs the tokens


def test_service_install_writes_a_user_unit_and_prints_the_next_step(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[router]\ndrain_timeout_s = 20\n")
    home = tmp_path / "home"
    env = {"XDG_CONFIG_HOME": str(home)}
    printed = iris(tmp_path, "service", "install", "--user", "--print", env=env)
    assert printed.returncode == 0 and not home.exists()
    unit = printed.stdout
    assert "Restart=on-failure\n" in unit and "RestartPreventExitStatus=2\n" in unit
    assert "UMask=0077\n" in unit  # the vault it makes is its user's alone
    assert f"WorkingDirectory={tmp_path.resolve()}\n" in unit
    assert f"EnvironmentFile=-{tmp_path.resolve() / '.env'}\n" in unit
    assert f"--config {tmp_path.resolve() / 'config.toml'}" in unit
    assert "TimeoutStopSec=35\n" in unit  # drain 20 s + margin
    assert "WantedBy=default.target" in unit
    installed = iris(tmp_path, "service", "install", "--user", env=env)
    assert installed.returncode == 0, installed.stderr
    path = home / "systemd" / "user" / "iris.service"
    assert path.read_text() == unit
    assert "systemctl --user daemon-reload && systemctl --user enable --now iris" in (
        installed.stdout
    )
    assert iris(tmp_path, "service", "install", "--user", env=env).returncode == 0  # same unit
    (tmp_path / "config.toml").write_text("[router]\ndrain_timeout_s = 5\n")
    changed = iris(tmp_path, "service", "install", "--user", env=env)
    assert changed.returncode == 2 and "exists and differs" in changed.stderr
    assert iris(tmp_path, "service", "install", "--user", "--force", env=env).returncode == 0
    assert "TimeoutStopSec=20\n" in path.read_text()


def test_a_unit_name_that_is_a_path_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"XDG_CONFIG_HOME": str(home), "HOME": str(home)}
    for name in ("../../../escaped", "a/b", "..", "", "iris staging"):
        result = iris(tmp_path, "service", "install", "--user", "--name", name, env=env)
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1] == (
            "iris service install: error: argument --name: a unit name is letters, digits and "
            "- _ . @ : only, like iris or iris-staging"
        )
    assert not home.exists()
    assert iris(tmp_path, "slack", "manifest", "--name", " ").stderr.splitlines()[-1] == (
        "iris slack manifest: error: argument --name: a Slack app's name is 1 to 35 characters"
    )
    assert iris(tmp_path, "audit", "--limit", "x").stderr.splitlines()[-1] == (
        "iris audit: error: argument --limit: 'x' is not a whole number"
    )


def test_audit_reads_without_creating_a_vault_and_shows_control_characters_escaped(
    tmp_path: Path,
) -> None:
    empty = iris(tmp_path, "audit")
    assert (empty.returncode, empty.stdout) == (0, "no vault at iris.db yet: nothing was audited\n")
    assert list(tmp_path.iterdir()) == []
    assert iris(tmp_path, "chat", stdin="hello\n").returncode == 0
    with sqlite3.connect(tmp_path / "iris.db") as db:
        db.execute(
            "INSERT INTO audit_log (at_ms, actor, via, action, args, outcome, result)"
            " VALUES (?, 'api', 'http', 'api intent', ?, 'ok', 'done')",
            (int(time.time() * 1000), json.dumps({"what": "a\x1b[2Jb\x00c"})),
        )
    db.close()
    shown = iris(tmp_path, "audit").stdout
    assert "\x1b" not in shown and "\x00" not in shown
    assert "api intent what=a\\x1b[2Jb\\x00c -> ok (done)" in shown


def test_version_and_every_option_has_help_and_its_default(tmp_path: Path) -> None:
    version = iris(tmp_path, "--version")
    assert version.returncode == 0 and re.fullmatch(r"iris \d+\.\d+\.\d+\n", version.stdout)
    undocumented = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(sub, f"{name} {sub_name}")
            elif action.option_strings and action.dest != "help" and not action.help:
                undocumented.append(f"{name} {action.option_strings[0]}")
        text = parser.format_help()
        text = text[text.index("options:") :]
        for action in parser._actions:
            if action.option_strings and action.dest not in ("help", "version"):
                entry = text[text.index(f"  {action.option_strings[0]}") + 2 :]
                entry = " ".join(entry[: entry.find("\n  -") if "\n  -" in entry else None].split())
                if "default" not in entry:
                    undocumented.append(f"{name} {action.option_strings[0]} (no default shown)")

    walk(build_parser(), "iris")
    assert undocumented == []
    shown = iris(tmp_path, "init", "--help")
    assert "--check-timeout CHECK_TIMEOUT" in shown.stdout and "(default: 10.0)" in shown.stdout
    assert "(default: off)" in shown.stdout and "None" not in shown.stdout


def test_the_container_files_match_the_package_and_the_health_route() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
    for pattern in packages:
        assert f"COPY {pattern.rstrip('*')} ./{pattern.rstrip('*')}\n" in dockerfile, pattern
    assert "http://127.0.0.1:8787/healthz" in dockerfile and 'CMD ["iris", "run"]' in dockerfile
    compose = (ROOT / "compose.yaml").read_text()
    assert "iris-data:/data" in compose and '"127.0.0.1:8787:8787"' in compose
    grace = int(re.search(r"stop_grace_period: (\d+)s", compose).group(1))  # type: ignore[union-attr]
    assert grace > 10  # the default drain deadline


def test_the_readme_keeps_its_first_two_commands_and_starts_with_init() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    assert blocks[:2] == [
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/iris chat\n",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test,semantic,postgres]' && "
        ".venv/bin/python -m pytest\n",
    ]
    assert blocks[2].startswith(".venv/bin/iris init")


def test_a_system_unit_runs_as_whoever_installs_it_never_silently_as_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli_deploy.os, "geteuid", lambda: 0)
    monkeypatch.setenv("SUDO_USER", "alice")
    assert cli_deploy.system_account() == "alice"  # `sudo iris service install` from alice
    monkeypatch.delenv("SUDO_USER")
    assert cli_deploy.system_account() is None  # root itself: the install says so
    monkeypatch.setattr(cli_deploy.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cli_deploy.getpass, "getuser", lambda: "bob")
    assert cli_deploy.system_account() == "bob"


def test_a_working_directory_under_tmp_is_not_hidden_by_a_private_tmp(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    under_tmp = replace(config, source=Path("/tmp/iris/config.toml"))
    elsewhere = replace(config, source=Path("/srv/iris/config.toml"))
    assert "PrivateTmp" not in cli_deploy.unit_text(under_tmp, user=True)
    assert "PrivateTmp=yes\n" in cli_deploy.unit_text(elsewhere, user=True)
