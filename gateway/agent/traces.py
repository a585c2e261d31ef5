"""The last context trace of each chat: what `/context`, `/admin trace` and `context_status`
report, and what suggestions check against.

A trace is kept in memory (bounded, LRU) for the readers on the turn's own path, and saved to
the vault (`vault/traces.py`, write-behind, one row per chat) so that `/context` still tells the
truth after a restart, and on another replica than the one that made the request. `latest()`
reads memory first, then the vault; `get()` is memory only (for a caller that runs right after
the request in the same process).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any

from gateway.agent.context import ContextTrace, TraceEntry, TraceItem
from vault.traces import TraceLog

log = logging.getLogger(__name__)

FORMAT = 1


def to_json(trace: ContextTrace) -> str:
    return json.dumps(
        {
            "v": FORMAT,
            "budget": trace.budget,
            "session": trace.session_pk,
            "total": trace.total_tokens,
            "entries": trace.entries,
            "items": trace.items,
            "dropped": trace.dropped,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def from_json(chat_key: str, at_ms: int, payload: str) -> ContextTrace | None:
    """The saved trace, or None when this version cannot read it (logged)."""
    try:
        data: dict[str, Any] = json.loads(payload)
        if int(data.get("v", 0)) != FORMAT:
            raise ValueError(f"format {data.get('v')!r}")
        return ContextTrace(
            chat_key=chat_key,
            at_ms=at_ms,
            budget=int(data["budget"]),
            session_pk=int(data.get("session", 0)),
            entries=[TraceEntry(*e) for e in data["entries"]],
            total_tokens=int(data["total"]),
            items=[TraceItem(*i) for i in data["items"]],
            dropped=[(TraceItem(*i), str(why)) for i, why in data["dropped"]],
        )
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("saved context trace of %s unreadable (%s); ignored", chat_key, exc)
        return None


class TraceStore:
    """The last trace per chat: memory (bounded, LRU) backed by the vault when given one."""

    def __init__(self, capacity: int = 1000, *, saved: TraceLog | None = None) -> None:
        self._traces: OrderedDict[str, ContextTrace] = OrderedDict()
        self._capacity = capacity
        self._saved = saved

    def _remember(self, trace: ContextTrace) -> None:
        self._traces[trace.chat_key] = trace
        self._traces.move_to_end(trace.chat_key)
        while len(self._traces) > self._capacity:
            self._traces.popitem(last=False)

    def put(self, trace: ContextTrace) -> None:
        self._remember(trace)
        if self._saved is not None:
            self._saved.save_soon(trace.chat_key, trace.at_ms, to_json(trace))

    def get(self, chat_key: str) -> ContextTrace | None:
        """This process's last trace of the chat (memory only)."""
        return self._traces.get(chat_key)

    async def latest(self, chat_key: str) -> ContextTrace | None:
        """The chat's last trace, whichever process made it and whenever."""
        saved = None if self._saved is None else await self._saved.load(chat_key)
        known = self._traces.get(chat_key)
        if saved is None or (known is not None and known.at_ms >= saved[0]):
            return known
        trace = from_json(chat_key, *saved)
        if trace is not None:
            self._remember(trace)
        return trace if trace is not None else known
