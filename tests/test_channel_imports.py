"""Channels depend on the core's types only (messages, ports, errors, formatting) and their SDK.

A channel is one package (`channels/telegram/`, `channels/slack/`); its modules may import each
other — relative imports are resolved here so they are checked too — but never another channel.
"""

from __future__ import annotations

import ast
from pathlib import Path

ALLOWED_CORE = {"gateway.messages", "gateway.ports", "gateway.errors", "gateway.formatting"}
ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"gateway", "vault", "proactive", "channels"}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def project_imports(path: Path) -> set[str]:
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                found.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] in PROJECT}


def test_channels_import_only_core_types_and_their_own_package() -> None:
    for path in (ROOT / "channels").rglob("*.py"):
        own = ".".join(module_name(path).split(".")[:2])  # channels.<platform>
        for module in project_imports(path):
            allowed = module in ALLOWED_CORE or module == own or module.startswith(own + ".")
            assert allowed, (module_name(path), module)


def test_only_the_composition_root_imports_channels() -> None:
    for package in ("gateway", "vault"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name in {"app.py", "cli.py"}:
                continue
            assert not any(m.startswith("channels") for m in project_imports(path)), path.name
