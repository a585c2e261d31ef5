"""Where a finished PostgreSQL dump goes: never over a backup that finished first, also on a
file system without hard links (some network mounts, vfat), where `os.link` fails."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gateway.core.errors import VaultError
from vault.pg.vault import _place


@pytest.mark.parametrize("links", [True, False])
def test_a_dump_takes_a_free_name_and_never_replaces_a_finished_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    if not links:  # the file system refuses hard links

        def no_links(src: object, dst: object) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_links)
    first, second, target = tmp_path / "a.partial", tmp_path / "b.partial", tmp_path / "v.dump"
    first.write_bytes(b"PGDMP first")
    second.write_bytes(b"PGDMP second")
    _place(first, target)
    with pytest.raises(VaultError, match="backup target already exists"):
        _place(second, target)
    assert target.read_bytes() == b"PGDMP first"
