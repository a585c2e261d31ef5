"""Schema for `/context refresh` requests (`vault/injections.py`): one row per session.

`/context refresh` asks that the next answered request of the session carry the new versions of
its `on_request` documents, and starts the session's refresh cooldown. Both used to live in
memory only, so a restart forgot a request the user had been told about; here they survive it,
beside the injection audit they complete. `pending` is cleared in the transaction that records
the refreshed injections.
"""

from __future__ import annotations

from vault.schema import Migration

CONTEXT_REFRESH = Migration(
    "context_refresh",
    (
        """CREATE TABLE context_refresh_requests (
            session INTEGER PRIMARY KEY REFERENCES sessions(id),
            requested_ms INTEGER NOT NULL,
            pending INTEGER NOT NULL DEFAULT 1 CHECK (pending IN (0, 1))
        ) STRICT""",
    ),
)
