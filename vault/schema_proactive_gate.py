"""Schema of the proactive gate's tool calls (`vault/proactive/gate_calls.py`).

When a follow-up comes due the model decides with the normal tool loop, so it may remember
something, register or cancel another follow-up, or search memories before it sends, skips or
defers. Each call is kept here with its result, for `/why` and for the model's next attempt
at the same item. A crash between a tool call and the decision re-runs the gate; the same call
made again (same item, tool and arguments) is recorded only once — the tools themselves refuse
to do a replayed call's work twice.
"""

from __future__ import annotations

from vault.schema import Migration

PROACTIVE_GATE = Migration(
    "proactive_gate",
    (
        """CREATE TABLE proactive_gate_calls (
            id INTEGER PRIMARY KEY,
            source TEXT NOT NULL CHECK (source IN ('intent', 'trigger')),
            item_id INTEGER NOT NULL,
            user INTEGER NOT NULL REFERENCES users(id),
            chat INTEGER NOT NULL REFERENCES chats(id),
            tool TEXT NOT NULL,
            input TEXT NOT NULL CHECK (json_valid(input)),
            result TEXT NOT NULL,
            is_error INTEGER NOT NULL DEFAULT 0,
            at_ms INTEGER NOT NULL,
            UNIQUE (source, item_id, tool, input)
        ) STRICT""",
        "CREATE INDEX proactive_gate_calls_user ON proactive_gate_calls(user, at_ms)",
    ),
)
