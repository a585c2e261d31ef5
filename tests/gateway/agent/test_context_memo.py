"""The pipeline's memo of request messages stays small however short the messages are (a
burst-and-soak benchmark found it growing by ~0.4 KiB per turn for hundreds of thousands of
turns when it counted only the text)."""

from __future__ import annotations

import sys

from gateway.agent.context import (
    MESSAGE_MEMO_CHARS,
    MESSAGE_MEMO_ENTRY_CHARS,
    ContextItem,
    ContextPipeline,
    Position,
    content_hash,
)


def test_short_messages_cannot_grow_the_memo_past_its_budget() -> None:
    pipeline = ContextPipeline(budget_tokens=1000)
    most = MESSAGE_MEMO_CHARS // MESSAGE_MEMO_ENTRY_CHARS + 1
    largest = 0
    for n in range(2 * most):
        pipeline._message("user", [f"m{n}"])
        largest = max(largest, len(pipeline._messages))
    assert largest <= most
    # The per-entry figure is honest: what one entry really holds, beside its text.
    key, message = next(iter(pipeline._messages.items()))
    held = sum(sys.getsizeof(o) for o in (key, message, message.parts, message.parts[0]))
    assert held <= MESSAGE_MEMO_ENTRY_CHARS


def test_remembered_content_hashes_are_right_and_within_the_same_budget() -> None:
    pipeline = ContextPipeline(budget_tokens=1000)
    most = MESSAGE_MEMO_CHARS // MESSAGE_MEMO_ENTRY_CHARS + 1
    largest = 0
    for n in range(2 * most):
        for _ in range(2):  # the second time from the memo, on a new item
            item = ContextItem(source="history", position=Position.HISTORY, content=f"m{n}")
            assert pipeline._hashed(item).content_hash == content_hash(f"m{n}")
        largest = max(largest, len(pipeline._hashes))
    assert largest <= most
