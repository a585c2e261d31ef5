"""The import rules of ARCHITECTURE §2, checked by parsing every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "channels", "proactive", "vault")
WIRING = {
    "gateway.app.app",
    "gateway.app.channels",
    "proactive.feature",
    "gateway.app.cli",
    "gateway.app.__main__",
}
CHANNEL_MAY_USE = {
    "gateway.core.messages",
    "gateway.core.ports",
    "gateway.core.errors",
    "gateway.core.formatting",
}
VAULT_MAY_USE = {"gateway.core.messages", "gateway.core.errors"}
SHARED_BY_CHANNELS = "channels.common"  # bookkeeping every platform channel needs


def modules() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            imports: set[str] = set()
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    imports.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imports.add(node.module)
                elif isinstance(node, ast.ImportFrom):  # relative: resolve against the package
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    imports.add(f"{base}.{node.module}" if node.module else base)
            found[name] = {i for i in imports if i.split(".")[0] in PACKAGES}
    return found


MODULES = modules()


def _platform(module: str) -> str:
    """`channels.telegram.events` -> `channels.telegram`: a channel's own package."""
    return ".".join(module.split(".")[:2])


def violations(rule: str) -> list[str]:
    bad = []
    for module, imports in MODULES.items():
        top = module.split(".")[0]
        for imported in imports:
            target = imported.split(".")[0]
            if (
                rule == "channels"
                and target == "channels"
                and top != "channels"
                and module not in WIRING
            ):
                bad.append(f"{module} imports {imported}")
            if (
                rule == "channel_deps"
                and top == "channels"
                and (
                    (target == "gateway" and imported not in CHANNEL_MAY_USE)
                    or target in ("vault", "proactive")
                    or (
                        target == "channels"
                        and _platform(imported) not in (_platform(module), SHARED_BY_CHANNELS)
                    )
                )
            ):
                bad.append(f"{module} imports {imported}")
            if (
                rule == "vault_deps"
                and top == "vault"
                and target in ("gateway", "channels", "proactive")
                and (imported not in VAULT_MAY_USE)
            ):
                bad.append(f"{module} imports {imported}")
            if (
                rule == "proactive_wiring"
                and imported.startswith("proactive")
                and (top != "proactive" and module not in WIRING)
            ):
                bad.append(f"{module} imports {imported}")
            if (
                rule == "proactive_deps"
                and top == "proactive"
                and (target == "channels" or imported in WIRING)
            ):
                bad.append(f"{module} imports {imported}")
            if rule == "messages" and module == "gateway.core.messages":
                bad.append(f"{module} imports {imported}")
    return bad


def test_modules_were_found() -> None:
    assert {"gateway.turns.router", "gateway.app.app", "channels.console", "vault.db"} <= set(
        MODULES
    )


@pytest.mark.parametrize(
    "rule",
    ["channels", "channel_deps", "vault_deps", "proactive_wiring", "proactive_deps", "messages"],
)
def test_import_rule(rule: str) -> None:
    assert violations(rule) == []


def test_the_router_never_imports_a_channel() -> None:
    assert not any(i.startswith("channels") for i in MODULES["gateway.turns.router"])
