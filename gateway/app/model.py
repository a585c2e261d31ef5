"""The model client the app runs with: the Anthropic adapter when a key is set, else none.

Without `ANTHROPIC_API_KEY` Iris still runs: commands work, and chat messages are saved and
answered with a "no model configured" notice (the agent raises `ModelNotConfigured`).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

from gateway.agent.anthropic_llm import AnthropicLLM
from gateway.app.config import Config
from gateway.core.ports import LLM

log = logging.getLogger(__name__)


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
            max_retries=llm.max_retries,
        )
    )
