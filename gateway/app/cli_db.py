"""`iris db migrate | backup PATH | restore PATH | copy SRC URL`: vault maintenance.

`migrate` and `backup` work on the configured vault, SQLite or PostgreSQL (`[vault] url`; a
PostgreSQL backup is `pg_dump`'s custom format). `copy` moves a SQLite vault into a PostgreSQL
database (`vault/pg/copy.py`): it can be run again, and prints every table's row count on both
sides.

`restore` takes the vault's exclusive lock (`vault/lock.py`), so it refuses while `iris run` or
`iris chat` uses the same vault, and never deletes anything: the file it replaces is kept
beside it (`vault/restore.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from functools import partial
from pathlib import Path

from gateway.app.cli_common import Subparsers, UsageError, add_command
from gateway.app.config import Config


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    db = sub.add_parser("db", help="vault maintenance", description="vault maintenance")
    commands = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    add_command(commands, "migrate", "apply pending migrations", parents=[common], runner=migrate)
    p = add_command(
        commands, "backup", "consistent online backup to PATH", parents=[common], runner=backup
    )
    p.add_argument("path", help="where to write the copy (must not exist)")
    p = add_command(
        commands,
        "restore",
        "replace the vault with a backup (Iris must be stopped)",
        parents=[common],
        runner=restore,
        description="Check the backup's integrity, keep the current vault as "
        "<vault>.replaced-<time>, and put the backup in its place. Refuses while Iris runs.",
    )
    p.add_argument("path", help="the backup file to restore")
    p.add_argument(
        "--keep-pending",
        action="store_true",
        help="do what the backup had left to do (send its waiting replies, answer its "
        "unanswered messages, its due follow-ups) even though some may have been done after "
        "the backup was taken; by default they are settled, never done twice",
    )
    p = add_command(
        commands,
        "copy",
        "copy a SQLite vault into PostgreSQL (idempotent)",
        parents=[common],
        runner=copy,
        description="Copy every row of the SQLite vault SRC into the PostgreSQL database at "
        "URL (both migrated first), skipping rows already there, then print each table's row "
        "count on both sides. Stop Iris on SRC first.",
    )
    p.add_argument("source", metavar="SRC", help="the SQLite vault file")
    p.add_argument("target", metavar="URL", help="postgresql://user:password@host/database")


async def migrate(args: argparse.Namespace, config: Config) -> int:
    from vault.backend import vault_for
    from vault.lock import in_use
    from vault.migrations import migrate

    s = config.settings.vault
    with in_use(s.path, s.url):
        async with vault_for(s.path, s.url) as vault:
            applied = await migrate(vault)
            version = await vault.user_version()
    print(f"applied: {', '.join(applied) if applied else 'nothing'}; schema version {version}")
    return 0


async def backup(args: argparse.Namespace, config: Config) -> int:
    from vault.backend import vault_for

    s = config.settings.vault
    async with vault_for(s.path, s.url) as vault:
        await vault.backup(Path(args.path))
    how = " (pg_dump custom format: restore with pg_restore)" if s.url else ""
    print(f"backup written to {args.path}{how}")
    return 0


async def copy(args: argparse.Namespace, config: Config) -> int:
    from vault.backend import vault_for
    from vault.lock import exclusive

    source, url = Path(args.source), str(args.target)
    if not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(f"URL must be a postgresql:// URL, not {url.split(':', 1)[0]!r}")
    if not await asyncio.to_thread(source.is_file):
        raise UsageError(f"SRC {source} is not a SQLite vault file")
    vault_for(source, url)  # says which extra is missing, if one is
    from vault.pg.copy import CopyConflict, copy_vault
    from vault.pg.vault import PgVault

    with exclusive(source):
        async with vault_for(source) as sqlite, PgVault(url, key="URL") as pg:
            try:
                counts = await copy_vault(sqlite, pg)
            except CopyConflict as exc:
                raise UsageError(str(exc)) from None
    width = max(len(c.table) for c in counts)
    for c in counts:
        mark = "" if c.matches else "  <- differs"
        print(f"{c.table:<{width}}  sqlite {c.source:>8}  postgresql {c.target:>8}{mark}")
    differing = [c.table for c in counts if not c.matches]
    if differing:
        print(f"row counts differ in: {', '.join(differing)}", file=sys.stderr)
        return 1
    total = sum(c.source for c in counts)
    print(f"in step: {len(counts)} tables, {total} rows on both sides, all counts match")
    return 0


async def restore(args: argparse.Namespace, config: Config) -> int:
    from vault.lock import exclusive
    from vault.restore import restore

    if config.settings.vault.url:
        raise UsageError(
            "restore replaces a SQLite vault; a PostgreSQL backup (iris db backup) is restored "
            "with pg_restore"
        )
    target = config.settings.vault.path
    with exclusive(target):
        kept, settled = await asyncio.to_thread(
            partial(restore, keep_pending=args.keep_pending), Path(args.path), target
        )
    print(f"restored {args.path} into {target}")
    if kept is not None:
        print(f"the vault it replaced is kept as {kept}")
    if settled:
        print(
            f"not done again (each may have been done after the backup was taken): "
            f"{settled.replies} waiting repl{'y' if settled.replies == 1 else 'ies'}, "
            f"{settled.messages} unanswered message(s), {settled.follow_ups} due "
            "follow-up(s) (restore with --keep-pending to have them done)"
        )
    print("next: iris run (an older backup's schema is migrated at start)")
    return 0
