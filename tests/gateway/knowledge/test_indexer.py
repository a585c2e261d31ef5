"""The indexer against real files: changes, deletions, and every kind of bad input — each
skipped with one log line naming the file, none stopping the others."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.app.app import App
from gateway.knowledge.feature import KnowledgeFeature
from tests.conftest import app_with
from tests.fakes import FakeLLM, MemoryChannel
from tests.gateway.knowledge.support import knowledge_config, write

GOOD = "---\ntype: runbook\nstatus: accepted\n---\n# Disk full\n\nFree space with du.\n"


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    config = knowledge_config(tmp_path, max_document_bytes=400)
    async with app_with(config, MemoryChannel(), FakeLLM()) as built:
        yield built


def knowledge(app: App) -> KnowledgeFeature:
    return app.feature(KnowledgeFeature)


async def rows(app: App) -> dict[str, tuple[str, str, str | None]]:
    found = await app.vault.fetchall(
        "SELECT path, type, content_hash, retired_ms FROM knowledge_documents"
    )
    return {r[0]: (r[1], r[2], r[3]) for r in found}


async def test_changes_are_picked_up_and_deleted_files_retired(app: App, tmp_path: Path) -> None:
    path = write(tmp_path, "runbooks/disk.md", GOOD)
    report = await knowledge(app).indexer.scan()
    assert report.indexed == 1
    first = (await rows(app))["docs/runbooks/disk.md"]
    assert first[0] == "runbook" and first[2] is None
    assert (await knowledge(app).indexer.scan()).indexed == 0  # unchanged mtime: not even read
    write(tmp_path, "runbooks/disk.md", GOOD.replace("du", "ncdu"))
    assert (await knowledge(app).indexer.scan()).indexed == 1
    assert (await rows(app))["docs/runbooks/disk.md"][1] != first[1]
    path.unlink()
    assert (await knowledge(app).indexer.scan()).retired == 1
    assert (await rows(app))["docs/runbooks/disk.md"][2] is not None
    chunks = await app.vault.scalar("SELECT count(*) FROM knowledge_chunks")
    assert chunks == 0


async def test_a_touched_file_with_the_same_content_is_not_rewritten(
    app: App, tmp_path: Path
) -> None:
    write(tmp_path, "a.md", GOOD)
    await knowledge(app).indexer.scan()
    before = await app.vault.scalar("SELECT indexed_ms FROM knowledge_documents")
    write(tmp_path, "a.md", GOOD)  # new mtime, same bytes
    report = await knowledge(app).indexer.scan()
    assert report.indexed == 0 and report.unchanged == 1
    assert await app.vault.scalar("SELECT indexed_ms FROM knowledge_documents") == before


async def test_bad_files_are_skipped_with_one_log_line_each(
    app: App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "good.md", GOOD)
    write(tmp_path, "image.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write(tmp_path, "latin1.md", "caf\xe9 cr\xe8me".encode("latin-1"))
    write(tmp_path, "big.md", "# Big\n\n" + "x" * 500)
    unreadable = tmp_path / "docs" / "unreadable.md"
    os.symlink("/proc/self/mem", unreadable)  # a regular file whose reads fail, even for root
    (tmp_path / "docs" / "dev").mkdir()
    os.symlink("/proc/self/mem", tmp_path / "docs" / "dev" / "mem.md")
    with caplog.at_level(logging.WARNING, logger="gateway.knowledge.indexer"):
        report = await knowledge(app).indexer.scan()
        await knowledge(app).indexer.scan()  # the next rescan says nothing new
    assert report.indexed == 1
    assert sorted(report.skipped) == [
        "docs/big.md", "docs/dev/mem.md", "docs/image.md", "docs/latin1.md",
        "docs/unreadable.md",
    ]  # fmt: skip
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5
    assert any("docs/big.md" in m and "max_document_bytes (507 > 400)" in m for m in lines)
    assert any("docs/image.md" in m and "binary" in m for m in lines)
    assert any("docs/latin1.md" in m and "UTF-8" in m for m in lines)
    # Links out of the documents' folder are never read (one into /proc, here, or to `.env`).
    assert sum("a link to a hidden file or one outside the documents' folder" in m
               for m in lines) == 2  # fmt: skip
    assert set(await rows(app)) == {"docs/good.md"}


async def test_a_file_that_turns_bad_is_retired(app: App, tmp_path: Path) -> None:
    write(tmp_path, "a.md", GOOD)
    await knowledge(app).indexer.scan()
    write(tmp_path, "a.md", "# A\n\n" + "y" * 600)
    await knowledge(app).indexer.scan()
    assert (await rows(app))["docs/a.md"][2] is not None


async def test_broken_front_matter_is_indexed_as_a_note_with_a_warning(
    app: App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "adr/1.md", "---\ntype: adr\nthis is not yaml\n---\n# ADR 1\n\ntext\n")
    write(tmp_path, "odd.md", "---\ntype: spike\nstatus: someday\n---\n# Odd\n\ntext\n")
    with caplog.at_level(logging.WARNING, logger="gateway.knowledge.indexer"):
        await knowledge(app).indexer.scan()
    found = await rows(app)
    assert found["docs/adr/1.md"][0] == "note" and found["docs/odd.md"][0] == "note"
    lines = [r.getMessage() for r in caplog.records]
    assert any("docs/adr/1.md" in m and "line 3 is not 'key: value'" in m for m in lines)
    assert any("docs/odd.md" in m and "unknown type 'spike'" in m for m in lines)
    assert any("docs/odd.md" in m and "unknown status 'someday'" in m for m in lines)


async def test_a_link_out_of_the_documents_folder_is_never_indexed(
    app: App, tmp_path: Path
) -> None:
    """A symlink named like a note but pointing at the config's `.env` put the API key in
    front of the model (in group chats too); one within the folder is an ordinary file."""
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-secret\n")
    write(tmp_path, "notes/real.md", GOOD)
    (tmp_path / "docs" / "notes" / "env-link.md").symlink_to(tmp_path / ".env")
    (tmp_path / "docs" / "notes" / "alias.md").symlink_to(tmp_path / "docs" / "notes" / "real.md")
    (tmp_path / "docs" / "notes" / "loop.md").symlink_to(tmp_path / "docs" / "notes" / "loop.md")
    report = await knowledge(app).indexer.scan()
    assert report.skipped == ["docs/notes/env-link.md"]  # the loop is no file at all
    assert sorted(await rows(app)) == ["docs/notes/alias.md", "docs/notes/real.md"]
    texts = await app.vault.fetchall("SELECT text FROM knowledge_chunks")
    assert not any("sk-secret" in r[0] for r in texts)
    # A glob with no folder of its own has the config's folder, where `.env` is, as its root.
    from gateway.knowledge.indexer import list_files

    listed = list_files(tmp_path, ["**/*.md"])
    assert listed["docs/notes/env-link.md"].outside and not listed["docs/notes/real.md"].outside


async def test_types_by_path_rule(tmp_path: Path) -> None:
    config = knowledge_config(tmp_path, types={"docs/decisions/*.md": "decision"})
    write(tmp_path, "decisions/pricing.md", "# Pricing\n\nThree seats free.\n")
    async with app_with(config, MemoryChannel(), FakeLLM()) as app:
        await knowledge(app).indexer.scan()
        assert (await rows(app))["docs/decisions/pricing.md"][0] == "decision"


def test_doctor_warns_about_a_glob_that_matches_nothing(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[auth]\nallow = ["telegram:1"]\n[context]\ndocuments = ["notes/*.md", "adr/*.md"]\n'
        "max_tokens = 3000\nknowledge_tokens = 4000\n"
    )
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n\nText.\n")
    # What the index would skip or read with a warning is named before anything runs.
    (tmp_path / "notes" / "binary.md").write_bytes(b"\x00\x01\x02")
    (tmp_path / "notes" / "broken.md").write_text("---\ntype adr\n---\n# B\n\nText.\n")
    (tmp_path / "notes" / "empty.md").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "ANTHROPIC"))}
    result = subprocess.run(
        [sys.executable, "-m", "gateway.app", "doctor", "--config", "config.toml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "documents: 4 file(s) matched" in result.stdout, result.stderr
    assert ", 3 indexable" in result.stdout
    assert "documents: WARNING notes/binary.md will be skipped: binary file" in result.stdout
    assert "documents: WARNING notes/broken.md: front matter" in result.stdout
    assert "documents: WARNING notes/empty.md is empty" in result.stdout
    assert "notes/a.md" not in result.stdout
    assert "documents: WARNING 'adr/*.md' matches no file" in result.stdout
    assert "WARNING context.knowledge_tokens (4000) is over context.max_tokens" in result.stdout
