"""Optional confirmation of a suspected topic shift by a cheap model.

Called only when the heuristic fires, never for ordinary messages, so its cost stays small.
The model answers one word: topic_shift, frustration or continuation. Anything else — a model
error, a timeout, an answer we cannot read — returns None and the caller keeps the heuristic's
verdict: the confirmation can only refine a suggestion, never break a turn.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from gateway.core.errors import ModelError, OverBudget
from gateway.core.llm import LLMMessage, LLMRequest, LLMResponse

log = logging.getLogger(__name__)

Verdict = Literal["topic_shift", "frustration", "continuation"]
# The model call, already bound to the chat it is made for (so usage is recorded per chat).
ModelCall = Callable[[LLMRequest], Awaitable[LLMResponse]]

INSTRUCTION = (
    "You classify the newest message of a chat between a user and an assistant. Answer with "
    "exactly one word: topic_shift if the newest message starts a subject unrelated to the "
    "earlier messages, frustration if the user is unhappy with how the conversation is "
    "going, continuation otherwise."
)
_VERDICT = re.compile(r"\b(topic_shift|frustration|continuation)\b")
MAX_QUOTED_CHARS = 500


def render_prompt(earlier: Sequence[str], text: str) -> str:
    lines = [f"- {m[:MAX_QUOTED_CHARS]}" for m in earlier]
    return (
        "Earlier user messages:\n"
        + ("\n".join(lines) or "(none)")
        + f"\n\nNewest message:\n{text[:MAX_QUOTED_CHARS]}\n\nAnswer:"
    )


def parse_verdict(answer: str) -> Verdict | None:
    found = _VERDICT.search(answer.lower().replace("topic shift", "topic_shift"))
    if found is None:
        return None
    verdict: Verdict = found.group(1)  # type: ignore[assignment]
    return verdict


class Confirmer:
    def __init__(self, *, model: str, timeout_s: float) -> None:
        self.model = model
        self.timeout_s = timeout_s

    def request(self, earlier: Sequence[str], text: str) -> LLMRequest:
        return LLMRequest(
            system_stable=INSTRUCTION,
            messages=(LLMMessage.user(render_prompt(earlier, text)),),
            max_tokens=8,
            model=self.model,
            purpose="analyzer",
        )

    async def confirm(self, call: ModelCall, earlier: Sequence[str], text: str) -> Verdict | None:
        """The model's verdict, or None when it failed or said something we can't use."""
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await call(self.request(earlier, text))
        except TimeoutError:
            log.info("analyzer confirmation timed out after %.1f s", self.timeout_s)
            return None
        except ModelError as exc:
            log.info("analyzer confirmation failed: %s", type(exc).__name__)
            return None
        except OverBudget:  # the turn's own call is refused the same way, with the notice
            log.info("analyzer confirmation refused: over budget")
            return None
        verdict = parse_verdict(response.text)
        if verdict is None:
            log.info("analyzer confirmation gave no usable verdict")
        return verdict
