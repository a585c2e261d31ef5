"""The saved work a process may take: the rows of the channels it runs.

`iris chat` runs the console, `iris run` the platforms, a replica whichever its config enables;
they may share one vault. Each place that reads saved work of many chats back — intake replay
and chat claims, the outbox resend and crash recovery, the proactive claim — adds this clause,
so that a process never takes (and fails, or answers where nobody reads it) another's rows,
and a `LIMIT` counts only rows it could do. One JSON parameter: the same SQL on SQLite and on
PostgreSQL (where `IN (SELECT value FROM json_each(?))` becomes `= ANY(…)`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence


def served_clause(
    column: str, served: Sequence[str] | None, *, chat_id: bool = False
) -> tuple[str, tuple[str, ...]]:
    """` AND <column> IN (…)` and its parameter, keeping rows on the `served` channels (None:
    every channel, no clause). `chat_id`: `column` holds a chat's row id, not a channel name."""
    if served is None:
        return "", ()
    names = "SELECT value FROM json_each(?)"
    if chat_id:
        names = f"SELECT id FROM chats WHERE channel IN ({names})"
    return f" AND {column} IN ({names})", (json.dumps(list(served)),)
