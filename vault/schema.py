"""What a migration is: a name and the statements that bring the schema one version up.

Its own module so that a store's schema can live beside it (`vault/schema_<topic>.py`) while
`vault/migrations.py` keeps the one ordered list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    statements: Sequence[str]
