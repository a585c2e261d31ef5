"""The recent history of sessions, remembered between turns so a turn reads only what is new.

A turn's context needs the last N chat messages of its session. Reading and building all N
every turn was the largest single cost of a turn; instead `RecentHistory` keeps, per session,
the window a turn last read, and the next turn reads only the messages after it.

Why that is always exact: messages are append-only (never updated or deleted) and their ids
only grow (SQLite gives a new row the largest rowid plus one; rows are never deleted). A
window read for "ids below B" right after the message with id B was committed cannot miss a
message: every lower id was assigned by a transaction that committed no later than B's. So
the messages below a window's `upto` are final, and what is new is exactly the ids from
`upto` on — including assistant messages written by the proactive engine or another process.
That holds only for windows bounded by a committed message id: an unbounded read ("up to
now", as `/compact` does) is never remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

NO_LIMIT = 2**62  # "no upper bound" for a message id
# What is remembered, least recently used out first; a forgotten session is read in full again.
CAPACITY = 4096  # windows
MAX_CHARS = 8_000_000  # of message text in all windows together (objects add ~100 B a message)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    id: int
    role: str
    kind: str
    text: str
    tokens: int
    at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """The last messages (at most the window's limit) of a session with an id below `upto`."""

    upto: int
    messages: tuple[StoredMessage, ...]
    chars: int  # of the messages' text


class RecentHistory:
    """Windows per (session, limit), least recently used first out."""

    def __init__(self, capacity: int = CAPACITY, max_chars: int = MAX_CHARS) -> None:
        self._capacity = capacity
        self._max_chars = max_chars
        self._windows: OrderedDict[tuple[int, int], Window] = OrderedDict()
        self._chars = 0

    def get(self, session: int, limit: int, upto: int) -> Window | None:
        """A window that a read up to `upto` can extend, if any."""
        window = self._windows.get((session, limit))
        return window if window is not None and window.upto <= upto else None

    def put(self, session: int, limit: int, window: Window) -> None:
        key = (session, limit)
        known = self._windows.pop(key, None)
        if known is not None:
            self._chars -= known.chars
            if known.upto > window.upto:  # a concurrent read already got further
                window = known
        self._windows[key] = window
        self._chars += window.chars
        while len(self._windows) > self._capacity or self._chars > self._max_chars:
            _, dropped = self._windows.popitem(last=False)
            self._chars -= dropped.chars
