"""Keeping the startup heap out of the cyclic garbage collector while the app serves.

By the time `App.serve()` starts, the process holds a few hundred thousand long-lived objects
(imported modules, pydantic schemas, SDK clients, caches) that will never become garbage.
CPython's full collections walk all of them: in the end-to-end benchmark one full collection
every ~200 messages cost about as much CPU as everything the turn's own code does. Freezing
them (`gc.freeze()`) moves them to a generation the collector never walks; objects made later
are collected as usual, and reference counting still frees everything. Whatever garbage
existed at the start is kept until `unfreeze` (it is bounded: startup happens once).

Serving apps may nest (tests run several in one loop): the heap stays frozen until the last of
them stops, then goes back to the collector, so a long test run does not keep the garbage of
every app it served.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_serving = 0


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze what exists now for the duration of the block (nested blocks share it)."""
    global _serving
    gc.freeze()
    _serving += 1
    try:
        yield
    finally:
        _serving -= 1
        if _serving == 0:
            gc.unfreeze()
