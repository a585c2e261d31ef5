"""ruff and mypy are part of the suite, so the one test command checks everything."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool(name: str) -> str:
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]'"
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_and_format() -> None:
    lint = run(tool("ruff"), "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run(tool("ruff"), "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict() -> None:
    result = run(tool("mypy"))
    assert result.returncode == 0, result.stdout + result.stderr
