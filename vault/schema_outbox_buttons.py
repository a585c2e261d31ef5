"""Schema for the buttons under a queued message (`vault/outbox.py`).

A reply with Use / Dismiss buttons (inline suggestions) that is not sent at once — a long
Retry-After, a platform outage, a restart — is sent later by the background resend from its
outbox row alone. The row used to keep only the text, so the buttons were lost on that path;
they are kept as JSON rows of `[label, payload]` pairs (NULL: none).
"""

from __future__ import annotations

from vault.schema import Migration

OUTBOX_BUTTONS = Migration(
    "outbox_buttons",
    ("ALTER TABLE outbox ADD COLUMN buttons TEXT",),
)
