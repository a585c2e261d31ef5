"""Two indexes on `messages` for the reads that grow with the whole history.

- `messages_chat_recent (chat, id, kind)`: a chat's last messages newest first, filtered by kind
  inside the index — the gate's "recent messages" (`recent_texts`) reads only the rows it
  returns instead of every message of the chat and a sort; and the passive scan's unanswered
  detector finds each chat's last chat/proactive message from the index alone, not one table
  row per message ever written.
- `messages_user_chat_time (user, at_ms) WHERE role = 'user' AND kind = 'chat'`: the scan's
  engagement-drop detector counts each user's own messages of the last five weeks without
  reading assistant, command and proactive rows.

Measured on the simulator's vault after 1,000 users × 30 days (57,000 messages): the
unanswered and engagement-drop detectors 0.32 → 0.04 s and 0.28 → 0.04 s, `recent_texts`
~280 → ~75 µs.
"""

from __future__ import annotations

from vault.schema import Migration

MESSAGE_INDEXES = Migration(
    "message_indexes",
    (
        "CREATE INDEX messages_chat_recent ON messages(chat, id, kind)",
        """CREATE INDEX messages_user_chat_time ON messages(user, at_ms)
            WHERE role = 'user' AND kind = 'chat'""",
    ),
)
