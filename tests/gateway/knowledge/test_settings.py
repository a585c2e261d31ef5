"""The knowledge keys of `[context]`: defaults, and one line naming the key for each bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app.config import ConfigError, load_config


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    return info.value.problems


def test_defaults(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("")
    context = load_config(tmp_path / "config.toml", env={}).settings.context
    assert context.documents == () and context.rescan_seconds == 30
    assert context.knowledge_tokens == 4000 and context.refresh_cooldown_seconds == 30
    assert context.max_document_bytes == 1024 * 1024 and context.retrieval == "auto"
    assert context.embed_threads == "auto"


def test_bad_values_are_one_line_each_naming_the_key(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        "[context]\ndocuments = ['']\nrescan_seconds = 0\nknowledge_tokens = -1\n"
        "max_document_bytes = 0\nretrieval = 'magic'\nembed_threads = 3\n"
        "[context.types]\n'adr/*.md' = 'spike'\n"
        "[context.scopes]\n'team/**' = ['slack:C1']\n'hr/**' = []\n",
    )
    keys = sorted(line.split(":")[0] for line in found)
    assert keys == [
        "context.documents",
        "context.embed_threads",
        "context.knowledge_tokens",
        "context.max_document_bytes",
        "context.rescan_seconds",
        "context.retrieval",
        "context.scopes",
        "context.types.adr/*.md",
    ], found
    scopes = next(line for line in found if line.startswith("context.scopes"))
    assert "'chat:slack:C0123' or 'user:telegram:42'" in scopes or "lists nobody" in scopes
