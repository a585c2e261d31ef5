"""Schema for the last context trace of each chat (`vault/traces.py`).

`/context` must show what the last model request of a chat contained. The trace used to live
in memory only: after a restart, or on another replica than the one that made the request,
`/context` had nothing (or something older) to show. One row per chat, replaced each request.
"""

from __future__ import annotations

from vault.schema import Migration

CONTEXT_TRACES = Migration(
    "context_traces",
    (
        """CREATE TABLE context_traces (
            chat_key TEXT PRIMARY KEY,
            at_ms INTEGER NOT NULL,
            trace TEXT NOT NULL
        ) STRICT""",
    ),
)
