"""`iris db migrate | backup PATH | restore PATH`: vault maintenance from the command line.

`restore` takes the vault's exclusive lock (`vault/lock.py`), so it refuses while `iris run` or
`iris chat` uses the same vault, and never deletes anything: the file it replaces is kept
beside it (`vault/restore.py`).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from gateway.app.cli_common import Subparsers, add_command
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


async def migrate(args: argparse.Namespace, config: Config) -> int:
    from vault.db import Vault
    from vault.lock import in_use
    from vault.migrations import migrate

    with in_use(config.settings.vault.path):
        async with Vault(config.settings.vault.path) as vault:
            applied = await migrate(vault)
            version = await vault.user_version()
    print(f"applied: {', '.join(applied) if applied else 'nothing'}; schema version {version}")
    return 0


async def backup(args: argparse.Namespace, config: Config) -> int:
    from vault.db import Vault

    async with Vault(config.settings.vault.path) as vault:
        await vault.backup(Path(args.path))
    print(f"backup written to {args.path}")
    return 0


async def restore(args: argparse.Namespace, config: Config) -> int:
    from vault.lock import exclusive
    from vault.restore import restore

    target = config.settings.vault.path
    with exclusive(target):
        kept = await asyncio.to_thread(restore, Path(args.path), target)
    print(f"restored {args.path} into {target}")
    if kept is not None:
        print(f"the vault it replaced is kept as {kept}")
    print("next: iris run (an older backup's schema is migrated at start)")
    return 0
