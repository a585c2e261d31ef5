"""Channels depend on the core's types only: messages, ports, errors, formatting (+ their SDK)."""

from __future__ import annotations

import ast
from pathlib import Path

ALLOWED_CORE = {"gateway.messages", "gateway.ports", "gateway.errors", "gateway.formatting"}
ROOT = Path(__file__).resolve().parent.parent


def project_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] in {"gateway", "vault", "proactive", "channels"}}


def test_channels_import_only_core_types_and_their_own_modules() -> None:
    for path in (ROOT / "channels").glob("*.py"):
        for module in project_imports(path):
            assert module in ALLOWED_CORE or module.startswith("channels."), (path.name, module)


def test_only_the_composition_root_imports_channels() -> None:
    for package in ("gateway", "vault"):
        for path in (ROOT / package).glob("*.py"):
            if path.name in {"app.py", "cli.py"}:
                continue
            assert not any(m.startswith("channels") for m in project_imports(path)), path.name
