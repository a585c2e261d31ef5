"""A model that reports usage the way prompt caching does: the cacheable prefix (tool specs,
then the stable system block, as the Anthropic adapter marks them) is read from cache when a
request repeats the exact bytes of an earlier one, and written otherwise. Token counts use the
pipeline's estimate. For the cache-share test and `bench/knowledge.py`."""

from __future__ import annotations

import hashlib
import json

from gateway.agent.context import estimate_tokens
from gateway.core.llm import LLMRequest, LLMResponse, TextPart


def _prefix(request: LLMRequest) -> str:
    tools = json.dumps(
        [[t.name, t.description, t.input_schema] for t in request.tools], sort_keys=True
    )
    return f"{tools}\n{request.system_stable}"


def _rest(request: LLMRequest) -> str:
    texts = [request.system_dynamic]
    for message in request.messages:
        texts.extend(p.text for p in message.parts if isinstance(p, TextPart))
    return "\n".join(texts)


class CachingLLM:
    def __init__(self) -> None:
        self.cached: set[str] = set()
        self.responses: list[LLMResponse] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        prefix = _prefix(request)
        key = hashlib.sha256(prefix.encode()).hexdigest()
        prefix_tokens = estimate_tokens(prefix)
        hit = key in self.cached
        self.cached.add(key)
        response = LLMResponse(
            parts=(TextPart("ok"),),
            stop_reason="end_turn",
            model="caching-fake",
            input_tokens=estimate_tokens(_rest(request)) + (0 if hit else prefix_tokens),
            output_tokens=1,
            cache_read_tokens=prefix_tokens if hit else 0,
            cache_write_tokens=0 if hit else prefix_tokens,
        )
        self.responses.append(response)
        return response


def cache_share(response: LLMResponse) -> float:
    """The share of a request's input tokens that were read from cache."""
    total = response.input_tokens + response.cache_read_tokens
    return response.cache_read_tokens / total if total else 0.0
