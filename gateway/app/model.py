"""The model client the app runs with, and the admins' alert when the model refuses the key.

Without `ANTHROPIC_API_KEY` Iris still runs: commands work, and chat messages are saved and
answered with a "no model configured" notice (the agent raises `ModelNotConfigured`).

A key the API refuses (HTTP 401) is different: every turn fails until someone fixes it, and
the users only see the model-down apology. `ModelHealth` (`gateway/agent/model_health.py`)
notices it on the first refused call and `/healthz` reports it; `KeyAlerts.run` then tells
each admin once per episode — one notice, through the normal delivery (outbox, retries), in
the direct chat where that admin last wrote to Iris. Why there: it is the one place we know
reaches them on their platform; a group would tell everyone, and a platform DM with someone
who never wrote to the bot may be refused. An admin with no such chat is named in the log
instead (`/healthz` and `iris doctor --online` still show the problem). An episode ends when
a call succeeds; a new refusal after that, or after a restart, is a new episode.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from contextlib import AsyncExitStack

from gateway.agent.anthropic_llm import AnthropicLLM
from gateway.agent.model_health import ModelHealth
from gateway.app.config import Config
from gateway.core.messages import Outbound, OutboundKind, UserRef
from gateway.core.ports import LLM
from gateway.turns.delivery import Delivery
from vault.conversations import Conversations

log = logging.getLogger(__name__)

KEY_REJECTED_NOTICE = (
    "Admin notice: the model API rejects Iris's API key (HTTP 401). Chat messages are saved "
    "but answered with an apology until a valid ANTHROPIC_API_KEY is set and Iris restarted. "
    "GET /healthz reports it; `iris doctor --online` checks the key."
)


async def open_model(config: Config, stack: AsyncExitStack) -> LLM | None:
    """The model client, closed with `stack`; None when no key is configured."""
    key = config.secrets.get("ANTHROPIC_API_KEY")
    if key is None:
        log.warning("ANTHROPIC_API_KEY is not set: chat messages get a 'no model' notice")
        return None
    llm = config.settings.llm
    return await stack.enter_async_context(
        AnthropicLLM(
            api_key=key,
            model=llm.model,
            base_url=llm.base_url,
            timeout_s=llm.timeout_s,
            deadline_s=llm.turn_deadline_seconds,
            max_retries=llm.max_retries,
        )
    )


class KeyAlerts:
    """Tells the admins, once per episode, that the model refuses the API key."""

    def __init__(
        self,
        *,
        health: ModelHealth,
        admins: Sequence[str],
        channels: Collection[str],
        conversations: Conversations,
        delivery: Delivery,
    ) -> None:
        self.health = health
        self.admins = admins
        self.channels = channels
        self.conversations = conversations
        self.delivery = delivery

    async def run(self) -> None:
        """Until cancelled: wait for a refusal, tell the admins, wait for the key to work."""
        while True:
            await self.health.rejected()
            await self.notify()
            await self.health.accepted()

    async def notify(self) -> int:
        """One notice to each admin's latest direct chat; returns how many were sent."""
        # The time tells this run's episodes from an earlier run's; the count, one run's apart.
        episode = f"{self.health.rejected_since_ms}.{self.health.episodes}"
        sent = 0
        for entry in self.admins:
            channel, _, user_id = entry.partition(":")
            if user_id == "*" or channel not in self.channels:
                continue
            chat = await self.conversations.latest_dm(UserRef(channel=channel, user_id=user_id))
            if chat is None:
                log.warning("admin %s has no direct chat with Iris: not told about the key", entry)
                continue
            out = Outbound(
                chat=chat,
                text=KEY_REJECTED_NOTICE,
                idempotency_key=f"model-key-rejected:{entry}:{episode}",
                kind=OutboundKind.NOTICE,
            )
            try:
                result = await self.delivery.deliver(out)
            except Exception:  # one admin's failure must not keep the others uninformed
                log.exception("could not tell admin %s about the rejected key", entry)
                continue
            sent += result.delivered
        return sent
