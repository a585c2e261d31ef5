"""What running one claimed item came to: the outcome a tick counts in its report.

Most outcomes are the item's terminal state (`vault.proactive.items.ItemStatus`), with the same
string, so a tick's report and the `status` column read alike. Two are not states of the row:
`deferred` (the item went back to `pending` for a later time: quiet hours, quota, the gate's
defer, a model that is down) and `lost` (the claim changed hands; the run that holds it now
finishes the item). The engine owns this vocabulary; the vault knows only the states.
"""

from __future__ import annotations

from enum import StrEnum

from vault.proactive.items import ItemStatus


class Outcome(StrEnum):
    SENT = "sent"
    SKIPPED = "skipped"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    DEFERRED = "deferred"
    LOST = "lost"

    @classmethod
    def ended(cls, status: ItemStatus) -> Outcome:
        """The outcome of a run that left its item in the terminal state `status`."""
        return cls(status.value)
