"""Shared pieces of the limits tests: a config priced at one micro-dollar per token (so a
dollar cap reads as a token count), model answers with usage figures, and a model that holds
each call until the test lets it answer (to race turns for the last tokens)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from gateway.app.config import Config
from gateway.core.llm import LLMRequest, LLMResponse, TextPart
from tests.conftest import make_config
from tests.fakes import FakeLLM

MODEL = "test-model"
# One micro-dollar a token for every kind of token: $0.001 is 1,000 tokens.
ONE_MICRO = {"input": 1.0, "output": 1.0, "cache_read": 1.0, "cache_write": 1.0}
OFF = {"user_usd_per_day": 0, "user_usd_per_month": 0, "global_usd_per_day": 0}


def limits_config(tmp_path: Path, **limits: Any) -> Config:
    sections: dict[str, Any] = {
        "llm": {"model": MODEL, "max_tokens": 64},
        "limits": {**OFF, "prices": {MODEL: ONE_MICRO}, **limits},
    }
    for other in ("auth", "analyzer", "vault"):  # sections given beside the limits
        if other in limits:
            sections[other] = sections["limits"].pop(other)
    return make_config(tmp_path, **sections)


def usage(
    text: str = "ok",
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read: int = 0,
    cache_write: int = 0,
) -> LLMResponse:
    return LLMResponse(
        parts=(TextPart(text),),
        stop_reason="end_turn",
        model=MODEL,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


class CostingLLM(FakeLLM):
    """Every call answers "ok" having used `tokens` tokens."""

    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.tokens = tokens

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        if self.replies:
            return await super().complete(request)
        half = self.tokens // 2
        return usage(self.default, input_tokens=self.tokens - half, output_tokens=half)


class HeldLLM(CostingLLM):
    """Holds every call until the test releases it; counts the calls in flight at once."""

    def __init__(self, tokens: int) -> None:
        super().__init__(tokens)
        self.arrived: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
        self.in_flight = 0
        self.most_in_flight = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        release: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self.arrived.put(release)
        try:
            await release
        finally:
            self.in_flight -= 1
        return await super().complete(request)


def local_ms(text: str, zone: str) -> int:
    """Epoch ms of a wall-clock time in a zone (`2026-03-08T23:59`)."""
    moment = datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))
    return int(moment.timestamp() * 1000)
