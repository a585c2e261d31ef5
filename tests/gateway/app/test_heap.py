"""The startup heap is frozen while an app serves, and handed back to the collector when the
last serving app stops (apps may serve side by side, as in tests)."""

from __future__ import annotations

import gc

from gateway.app.heap import frozen_heap


def test_the_heap_stays_frozen_until_the_last_block_ends() -> None:
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with frozen_heap():
            assert gc.get_freeze_count() >= frozen
        assert gc.get_freeze_count() >= frozen  # the outer block still serves
    assert gc.get_freeze_count() == 0


def test_a_failing_block_unfreezes_too() -> None:
    try:
        with frozen_heap():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0
