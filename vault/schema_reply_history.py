"""Schema for replies that join the history however their send ends (`vault/outbox.py`).

A reply enters the session history when it was, or may have been, delivered: the model's
history must match what the user saw. The live process knows the session, but a crash (a row
left `sending`), a send cut off at shutdown, or a reply queued for the background resend when
the process stopped settle later, in code that has only the outbox row. So the row carries what
recording needs: the session and chat it joins, the history kind and its token estimate.
`history_session` is cleared once the text is recorded, so it is recorded exactly once,
whichever path settles the row first.
"""

from __future__ import annotations

from vault.schema import Migration

REPLY_HISTORY = Migration(
    "reply_history",
    (
        "ALTER TABLE outbox ADD COLUMN history_session INTEGER REFERENCES sessions(id)",
        "ALTER TABLE outbox ADD COLUMN history_chat INTEGER REFERENCES chats(id)",
        "ALTER TABLE outbox ADD COLUMN history_kind TEXT",
        "ALTER TABLE outbox ADD COLUMN history_tokens INTEGER",
    ),
)
