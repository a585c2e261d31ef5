"""Pricing: each kind of token at its own price, and an estimate that bounds the real usage."""

from __future__ import annotations

import pytest

from gateway.core.llm import LLMMessage, LLMRequest, ToolCall, ToolResult, ToolSpec
from gateway.limits.notices import usd
from gateway.limits.prices import PriceTable, estimate, input_bound, usage_cost
from gateway.limits.settings import DEFAULT_PRICES, ModelPrice
from tests.fakes import FakeAnthropicAPI, message_body
from tests.gateway.limits.support import usage


def test_cache_reads_and_writes_are_priced_as_such() -> None:
    sonnet = DEFAULT_PRICES["claude-sonnet-5-5"]  # $2 in, $10 out, $2.50 write, $0.10 read
    used = usage(input_tokens=1_000, output_tokens=500, cache_read=10_000, cache_write=2_000)
    cost = usage_cost(used, sonnet)
    # 1,000 x 2 + 500 x 10 + 10,000 x 0.10 + 2,000 x 2.50 micro-dollars
    assert cost.usd_micros == 2_000 + 5_000 + 1_000 + 5_000
    assert cost.tokens == 13_500
    # The same tokens all billed as plain input would cost 25,000 + 5,000: caching is cheaper.
    plain = usage(input_tokens=13_000, output_tokens=500)
    assert usage_cost(plain, sonnet).usd_micros == 31_000


def test_haiku_cache_reads_cost_a_tenth_of_input() -> None:
    haiku = DEFAULT_PRICES["claude-haiku-5-5"]
    assert usage_cost(usage(cache_read=1_000_000), haiku).usd_micros == 10_000  # $0.01
    assert usage_cost(usage(cache_write=1_000_000), haiku).usd_micros == 125_000


def test_the_estimate_bounds_every_kind_of_input() -> None:
    text = "grüße " * 200  # multi-byte characters: still at most one token per byte
    request = LLMRequest(
        system_stable="persona",
        system_dynamic="today",
        messages=(
            LLMMessage.user(text),
            LLMMessage("assistant", (ToolCall("t1", "remember", {"fact": text}),)),
            LLMMessage("user", (ToolResult("t1", text),)),
        ),
        tools=(ToolSpec("remember", "keep a fact", {"type": "object"}),),
        max_tokens=300,
    )
    bound = input_bound(request)
    assert bound > 3 * len(text.encode())
    price = ModelPrice(input=1.0, output=2.0, cache_read=0.5, cache_write=1.5)
    cost = estimate(request, price)
    assert cost.tokens == bound + 300
    # Every input token at the dearest input price (a cache write), the output at its cap.
    assert cost.usd_micros >= bound * 1.5 + 300 * 2.0


def test_an_unknown_model_is_priced_like_the_dearest_known() -> None:
    table = PriceTable(DEFAULT_PRICES)
    assert "claude-unknown" not in table
    dearest = table.of("claude-unknown")
    assert dearest.output == max(p.output for p in DEFAULT_PRICES.values())


async def test_the_adapter_reports_cache_reads_and_writes() -> None:
    api = FakeAnthropicAPI()
    body = message_body([{"type": "text", "text": "hi"}])
    body["usage"] |= {"cache_read_input_tokens": 700, "cache_creation_input_tokens": 300}
    api.queue.append((200, body))
    async with api.adapter() as llm:
        request = LLMRequest(system_stable="s", messages=(LLMMessage.user("hi"),))
        response = await llm.complete(request)
    assert (response.cache_read_tokens, response.cache_write_tokens) == (700, 300)


@pytest.mark.parametrize(
    ("micros", "shown"),
    [
        (0, "$0.00"),
        (40, "$0.00004"),
        (1_500, "$0.0015"),
        (9_999, "$0.009999"),
        (10_000, "$0.01"),
        (5_000_000, "$5.00"),
    ],
)
def test_amounts_under_a_cent_do_not_read_as_zero(micros: int, shown: str) -> None:
    assert usd(micros) == shown
