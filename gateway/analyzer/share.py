"""The analyzer's share of embedding time: semantic analysis as bounded, best-effort work.

Embedding a message with the local model costs tens of milliseconds of CPU, more than the
rest of a turn, and a tip is a nicety. So the embeddings of chat messages draw on a token
bucket of embedding time (`[analyzer] embed_share`): it fills at `share` seconds per second
(the share of one core the analyzer may spend embedding) up to `share * BURST_S` seconds,
and every embedding's duration, from the call until its vector is back, is charged to it
afterwards. A message is embedded only while the bucket holds time; when it is empty the
message is judged by the rules alone (`lazy.py`) and keeps its text in the session's state,
so a later message can still embed it when its verdict needs it — charged the same way.

The bucket may go below zero: an embedding is admitted whole and charged what it took, the
debt refilled before the next one. The charge is wall time, not the model thread's CPU:
under load a call waits for a core too and is charged for it, so the analyzer backs off
further just when CPU is scarce. Light traffic never empties the bucket (at 0.25, a message
embedded in 25 ms every 0.1 s spends exactly the refill), so every message is embedded as
before; a burst spends the stored time first.

Two more bounds hold below share 1, for the same reason:

- **Waiting**: a message is embedded only while fewer than `MAX_WAITING` jobs wait for the
  model (`queue`, given by the composition root: the local model's calls queued or running,
  for whichever feature; else the analyzer's own messages being embedded). The model's one
  worker runs them one after another, and the reply waits for its message's verdict when the
  model answers faster than the embedding, so a message admitted behind a long queue (or an
  indexer's batch of passages) would hold its reply for all of it; beyond it, the rules judge.
- **A spare core** (`spare`, given by the composition root: `knowledge/spare_core.py`): a
  message is embedded only while the machine has a whole core free of everything but the
  embedding model itself. When the turns and everything else keep the cores busy, every
  embedding would take CPU from the replies, one for one.

`share` 1 is no limit at all (none of the three bounds), 0 never embeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Seconds of refill the bucket can hold: at share 0.25, 2.5 s of embedding (about a hundred
# messages) before a burst is judged by the rules.
BURST_S = 10.0
# A message is embedded only while fewer jobs than this wait for the model (its queue, or
# the analyzer's own messages being embedded).
MAX_WAITING = 2


class EmbedShare:
    """A token bucket of embedding seconds; `now` is a monotonic clock in seconds."""

    def __init__(
        self,
        share: float,
        *,
        burst_s: float = BURST_S,
        now: Callable[[], float] = time.monotonic,
        spare: Callable[[], bool] | None = None,
        queue: Callable[[], int] | None = None,
    ) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError("embed_share must be between 0 and 1")
        self.share = share
        self.capacity = share * burst_s
        self.now = now
        self.spare = spare
        self.queue = queue
        self.waiting = 0  # the analyzer's messages being embedded (or about to be) now
        self._tokens = self.capacity
        self._at = now()

    @property
    def unlimited(self) -> bool:
        return self.share >= 1.0

    def _refill(self) -> float:
        now = self.now()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.share)
        self._at = now
        return self._tokens

    def admit(self) -> bool:
        """May one more message be embedded now? (The spare core is asked last: it reads
        `/proc/stat`.)"""
        if self.unlimited:
            return True
        waiting = max(self.waiting, self.queue()) if self.queue is not None else self.waiting
        return (
            self.share > 0.0
            and waiting < MAX_WAITING
            and self._refill() > 0.0
            and (self.spare is None or self.spare())
        )

    @contextmanager
    def holding(self) -> Iterator[None]:
        """From a message's admission to the end of its embedding: it counts as waiting."""
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1

    @contextmanager
    def charging(self) -> Iterator[None]:
        """Around the model call: its duration is charged, whatever its outcome."""
        started = self.now()
        try:
            yield
        finally:
            self.charge(self.now() - started)

    def charge(self, seconds: float) -> None:
        """An embedding took `seconds`."""
        if not self.unlimited:
            self._refill()
            self._tokens -= max(0.0, seconds)

    @property
    def available_s(self) -> float:
        """Embedding seconds left in the bucket now (negative: in debt)."""
        return float("inf") if self.unlimited else self._refill()
