"""Import rules for the proactive package and its stores, checked with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "proactive").glob("*.py")), ids=lambda p: p.name)
def test_proactive_never_imports_channels_or_the_app(path: Path) -> None:
    bad = {m for m in imports(path) if m.startswith("channels") or m == "gateway.app.app"}
    assert not bad


@pytest.mark.parametrize(
    "path", sorted((ROOT / "vault").glob("proactive*.py")), ids=lambda p: p.name
)
def test_proactive_stores_import_only_stdlib_vault_and_core_types(path: Path) -> None:
    project = {m for m in imports(path) if m.split(".")[0] in ("gateway", "channels", "proactive")}
    assert project <= {"gateway.core.messages", "gateway.core.errors"}
