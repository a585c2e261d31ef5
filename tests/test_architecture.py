"""The layout's rules, as data: which package may import which, checked by parsing imports.

`LAYERS` maps each package to the project packages it may import (besides itself). A module
belongs to the longest package prefix listed; `channels.<platform>` may also import its own
platform package. `gateway/core/` imports the standard library only. Every other rule of
AGENTS.md's layout table (the router never imports a channel, only `gateway/app/` wires
concrete pieces, `proactive/` never reaches the admin surface) follows from this table.
"""

from __future__ import annotations

import ast
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "channels", "proactive", "vault")

CORE = {"gateway.core"}
STORES = CORE | {"vault"}
AGENT = STORES | {"gateway.agent"}
TURNS = AGENT | {"gateway.turns"}
FEATURE = TURNS | {"gateway.features"}
LAYERS: dict[str, set[str]] = {
    "gateway.core": set(),
    "vault": CORE,
    "gateway.agent": STORES,
    "gateway.turns": AGENT,
    "gateway.features": TURNS,
    "gateway.analyzer": FEATURE,
    "gateway.limits": FEATURE,
    "gateway.knowledge": FEATURE,
    "gateway.suggestions": FEATURE | {"gateway.knowledge"},
    "gateway.subscriptions": FEATURE | {"gateway.suggestions"},
    "proactive": FEATURE,
    "gateway.admin": FEATURE,
    "gateway.app": {"gateway", "channels", "proactive", "vault"},
    "channels.common": CORE,
    "channels": CORE | {"channels.common"},
}
# Third-party libraries the core may not use either: it is the standard library only.
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _imports(path: Path, name: str) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom):  # relative: resolve against the package
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            found.add(f"{base}.{node.module}" if node.module else base)
    return found


def _modules() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            if name not in PACKAGES:  # a top-level `__init__` is only a docstring
                found[name] = _imports(path, name)
    return found


MODULES = _modules()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_of(module: str) -> str:
    matches = [layer for layer in LAYERS if _within(module, layer)]
    assert matches, f"{module} is in no layer: add its package to LAYERS"
    return max(matches, key=len)


def _own(module: str) -> str:
    """The package a module may always import: its layer, or its own platform channel."""
    layer = layer_of(module)
    return ".".join(module.split(".")[:2]) if layer == "channels" else layer


def violations() -> list[str]:
    bad = []
    for module, imports in MODULES.items():
        allowed = LAYERS[layer_of(module)] | {_own(module)}
        for imported in imports:
            if imported.split(".")[0] not in PACKAGES:
                if layer_of(module) == "gateway.core" and imported.split(".")[0] not in STDLIB:
                    bad.append(f"{module} imports {imported} (the core is stdlib only)")
                continue
            if not any(_within(imported, ok) for ok in allowed):
                bad.append(f"{module} imports {imported}")
    return bad


def test_modules_were_found() -> None:
    assert {"gateway.turns.router", "gateway.app.app", "channels.console", "vault.db"} <= set(
        MODULES
    )


def test_every_import_follows_the_layers() -> None:
    assert violations() == []


def test_the_packages_form_no_cycle() -> None:
    """Between packages (a module's layer, or its platform channel), imports go one way."""
    graph: dict[str, set[str]] = {}
    for module, imports in MODULES.items():
        edges = graph.setdefault(_own(module), set())
        edges.update(_own(i) for i in imports if i.split(".")[0] in PACKAGES)
    for node in graph:
        graph[node].discard(node)
    seen: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if seen.get(node) == 1:
            pytest.fail("import cycle: " + " -> ".join([*path, node]))
        if seen.get(node) == 2:
            return
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        seen[node] = 2

    for node in sorted(graph):
        visit(node, [])


def test_gateway_has_only_subpackages_at_its_top() -> None:
    assert sorted(p.name for p in (ROOT / "gateway").glob("*.py")) == ["__init__.py"]


SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b"
)


@pytest.mark.parametrize("top", ["gateway", "channels", "proactive"])
def test_no_sql_outside_the_vault(top: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / top).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SQL.search(line)
    ]
    assert found == []


def test_module_sizes() -> None:
    """Small modules with one job: median 100-250 lines; over 400 only with a reason given in
    the module docstring (a line starting `Size:`)."""
    sizes = {}
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            if path.name != "__init__.py":
                sizes[path] = len(path.read_text().splitlines())
    assert 100 <= statistics.median(sizes.values()) <= 250
    long = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p, n in sizes.items()
        if n > 400 and "\nSize: " not in (ast.get_docstring(ast.parse(p.read_text())) or "")
    ]
    assert long == []
