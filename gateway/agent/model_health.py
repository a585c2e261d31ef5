"""The model's health as the gateway sees it: is the API key being refused?

A 401 is not an outage that passes by itself: every turn will fail until an admin fixes the
key. `Agent.call` reports each refusal and each successful call here; `GET /healthz` shows the
problem (an entry "model", not connected, "API key rejected"; the report's problem line reads
"model: API key rejected") from the first refusal until a call succeeds again, and
the admin alert job (`gateway/app/model.py`) waits on `rejected()` to tell the admins once
per episode. Transient failures (rate limits, 5xx, timeouts) are not health problems: the
deadline already answers the user, and the next call may well succeed. A run of them is
shown, though, as `degraded` in `/healthz` (`ok` stays true): from `FAILING_STREAK` failed
calls in a row until one succeeds, so a probe sees that users get the apology. Requests the
API refuses for what they are (HTTP 400) count towards that run too. A refusal of the model
itself — HTTP 404 (a mistyped `[llm] model`, or a base URL without the Messages API) or 403
(the key may not use it) — fails every call like a rejected key: a problem entry until a call
succeeds, naming the setting to check.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from gateway.core.messages import ChannelHealth

log = logging.getLogger(__name__)

KEY_REJECTED = "API key rejected"
FAILING_STREAK = 3  # failed calls in a row before `/healthz` says the model is failing
# HTTP statuses by which the API refuses the configured model itself, and what to check.
MODEL_REFUSED = {
    403: "the API key may not use this model (HTTP 403): check [llm] model and the key's access",
    404: "the API does not know this model (HTTP 404): check [llm] model and [llm] base_url",
}


class ModelHealth:
    def __init__(self) -> None:
        self._rejected = asyncio.Event()
        self._accepted = asyncio.Event()
        self._accepted.set()
        self.rejected_since_ms: int | None = None
        self.episodes = 0  # refusals that began after the key had worked (or at start)
        self.failed_in_a_row = 0  # transient failures since the last answer
        self.failing_since_ms: int | None = None
        self.refused: str | None = None  # why the API refuses the model (`MODEL_REFUSED`)

    @property
    def key_rejected(self) -> bool:
        return self._rejected.is_set()

    def report_key_rejected(self, now_ms: int) -> None:
        if self._rejected.is_set():
            return
        log.error("the model API rejected the API key (HTTP 401): check ANTHROPIC_API_KEY")
        self.rejected_since_ms = now_ms
        self.episodes += 1
        self._accepted.clear()
        self._rejected.set()

    def report_failed(self, now_ms: int) -> None:
        """A call failed for a passing reason (a rate limit, a 5xx, a timeout)."""
        if self.failed_in_a_row == 0:
            self.failing_since_ms = now_ms
        self.failed_in_a_row += 1

    def report_refused(self, status: int | None, now_ms: int) -> None:
        """The API refused a request for good (`ModelRejected`): the model itself (403, 404)
        is a problem until a call succeeds; anything else counts as a failed call."""
        detail = MODEL_REFUSED.get(status or 0)  # the statuses of `refuses_model`
        if detail is None:
            self.report_failed(now_ms)
            return
        if self.refused is None:
            log.error("the model API refuses the configured model: %s", detail)
        self.refused = detail

    def failing(self) -> str | None:
        """The `/healthz` `degraded` line while calls keep failing, else None."""
        if self.failed_in_a_row < FAILING_STREAK or self.failing_since_ms is None:
            return None
        since = datetime.fromtimestamp(self.failing_since_ms / 1000, UTC)
        return (
            f"model: the last {self.failed_in_a_row} calls failed (since "
            f"{since:%Y-%m-%d %H:%M} UTC: rate limits, server errors, timeouts or refused "
            "requests); users get an apology"
        )

    def report_answered(self) -> None:
        self.failed_in_a_row, self.failing_since_ms = 0, None
        if self.refused is not None:
            log.warning("the model API answers the configured model again")
            self.refused = None
        if not self._rejected.is_set():
            return
        log.warning("the model API accepts the API key again")
        self.rejected_since_ms = None
        self._rejected.clear()
        self._accepted.set()

    def report(self) -> ChannelHealth | None:
        """The `/healthz` entry while there is a problem, else None."""
        if self._rejected.is_set():
            return ChannelHealth(channel="model", connected=False, detail=KEY_REJECTED)
        if self.refused is not None:
            return ChannelHealth(channel="model", connected=False, detail=self.refused)
        return None

    async def rejected(self) -> None:
        """Until the key is being refused."""
        await self._rejected.wait()

    async def accepted(self) -> None:
        """Until the key works (at once when it never failed)."""
        await self._accepted.wait()
