"""What a model call costs: its real usage priced, and an upper bound for one not yet made.

Money is integer micro-dollars: a token at $X per million tokens costs exactly X micro-dollars,
so a call's cost is a weighted sum of its token counts, rounded once. Anthropic reports
input, cache reads and cache writes as separate counts (`input_tokens` excludes the cached
parts) and bills each at its own price; the token budget counts all of them, plus output.

The estimate made before a call is meant to be an upper bound, because the limits admit calls
against it while other calls are in flight (`gateway/limits/meters.py`): every input byte is
counted as a token (a tokenizer's tokens span at least one byte), plus the framing of each
message and the tool-use system prompt, all at the dearest input price (a cache write); and
the output at its cap, `max_tokens`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolCall, ToolSpec
from gateway.limits.settings import ModelPrice

BASE_OVERHEAD = 32
PER_MESSAGE = 8
TOOLS_OVERHEAD = 512  # the system prompt the API adds when tools are offered, and then some


@dataclass(frozen=True, slots=True)
class Cost:
    tokens: int
    usd_micros: int


def usage_cost(response: LLMResponse, price: ModelPrice) -> Cost:
    tokens = (
        response.input_tokens
        + response.output_tokens
        + response.cache_read_tokens
        + response.cache_write_tokens
    )
    micros = (
        response.input_tokens * price.input
        + response.output_tokens * price.output
        + response.cache_read_tokens * price.cache_read
        + response.cache_write_tokens * price.cache_write
    )
    return Cost(tokens, round(micros))


def input_bound(request: LLMRequest) -> int:
    """At least as many tokens as the request's input can be."""
    size = len(request.system_stable.encode()) + len(request.system_dynamic.encode())
    size += BASE_OVERHEAD + PER_MESSAGE * len(request.messages)
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, TextPart):
                size += len(part.text.encode())
            elif isinstance(part, ToolCall):
                size += len(part.name.encode()) + len(json.dumps(part.input).encode())
            else:
                size += len(part.tool_use_id) + len(part.content.encode())
    if request.tools:
        size += TOOLS_OVERHEAD + _tools_size(request.tools)
    return size


# The tool registry hands out the same tuple for the same set of tools: its size is counted
# once (the tuple is kept beside it, so its id cannot be reused while the entry exists).
_TOOL_SIZES: dict[int, tuple[tuple[ToolSpec, ...], int]] = {}


def _tools_size(tools: tuple[ToolSpec, ...]) -> int:
    known = _TOOL_SIZES.get(id(tools))
    if known is not None and known[0] is tools:
        return known[1]
    size = sum(
        len(t.name) + len(t.description.encode()) + len(json.dumps(t.input_schema).encode())
        for t in tools
    )
    if len(_TOOL_SIZES) >= 64:
        _TOOL_SIZES.clear()
    _TOOL_SIZES[id(tools)] = (tools, size)
    return size


def estimate(request: LLMRequest, price: ModelPrice) -> Cost:
    inputs = input_bound(request)
    dearest = max(price.input, price.cache_write, price.cache_read)
    micros = inputs * dearest + request.max_tokens * price.output
    return Cost(inputs + request.max_tokens, int(micros) + 1)


class PriceTable:
    """Prices by model id. A model missing from the table (the config check prevents that
    for the configured models) is priced like the dearest one known: never cheaper."""

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        self._prices = dict(prices)
        self._dearest = max(
            self._prices.values(),
            key=lambda p: (p.output, p.input),
            default=ModelPrice(input=0, output=0, cache_read=0, cache_write=0),
        )

    def __contains__(self, model: str) -> bool:
        return model in self._prices

    def of(self, model: str) -> ModelPrice:
        return self._prices.get(model, self._dearest)
