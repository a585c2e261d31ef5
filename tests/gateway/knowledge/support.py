"""Shared helpers of the knowledge tests: a config whose documents live under `tmp_path`, files
written with distinct mtimes, and what a model request carried, read back from its text."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.app.config import Config
from gateway.core.llm import LLMRequest, TextPart
from tests.conftest import make_config

_DOC = re.compile(
    r'<document [^>]*path="([^"]+)"[^>]*version="([0-9a-f]+)"[^>]*>\n(.*?)\n</document>', re.S
)
_mtime = [1_700_000_000_000_000_000]


def knowledge_config(tmp_path: Path, **context: Any) -> Config:
    """Documents under `tmp_path/docs`, lexical retrieval (deterministic), as if the config file
    were `tmp_path/config.toml`."""
    settings: dict[str, Any] = {
        "documents": ["docs/**/*.md", "docs/**/*.txt"],
        "retrieval": "lexical",
        "refresh_cooldown_seconds": 0,
        **context,
    }
    return replace(make_config(tmp_path, context=settings), source=tmp_path / "config.toml")


def write(root: Path, rel: str, text: str | bytes) -> Path:
    """Write a document with an mtime of its own (a rescan must see every write)."""
    path = root / "docs" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    _mtime[0] += 1_000_000_000
    os.utime(path, ns=(_mtime[0], _mtime[0]))
    return path


def request_text(request: LLMRequest) -> str:
    parts = [request.system_stable, request.system_dynamic]
    for message in request.messages:
        parts.extend(p.text for p in message.parts if isinstance(p, TextPart))
    return "\n".join(parts)


def documents_in(request: LLMRequest) -> dict[str, tuple[str, str]]:
    """path -> (version attribute, body) of every document block the request carried."""
    return {m[0]: (m[1], m[2]) for m in _DOC.findall(request_text(request))}
