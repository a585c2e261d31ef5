"""A deterministic `Embedder` for tests: words of a few topics (in several languages) point
along one axis per topic, every other word along a hashed axis of its own with a small
weight, so texts on one topic are close whatever their words, and unrelated texts are not.
`calls` counts the texts it embedded (the cache per chunk hash must keep it low)."""

from __future__ import annotations

import array
import hashlib
import math
import re
import sys
from collections.abc import Sequence

TOPICS = {
    "vacation": {"holiday", "holidays", "vacation", "leave", "urlaub", "urlaubstage", "vacaciones"},
    "database": {"postgres", "postgresql", "database", "datenbank", "replica", "failover"},
    "money": {"salary", "pay", "paid", "compensation", "allowance", "gehalt"},
}
_AXES = {word: n for n, words in enumerate(TOPICS.values()) for word in words}
_WORD = re.compile(r"\w+")
HASHED = 61


class FakeEmbedder:
    model = "fake-topics-1"
    dim = len(TOPICS) + HASHED

    def __init__(self) -> None:
        self.calls = 0

    def vector(self, text: str) -> list[float]:
        values = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            if word in _AXES:
                values[_AXES[word]] += 1.0
            else:
                digest = hashlib.sha256(word.encode()).digest()
                values[len(TOPICS) + digest[0] % HASHED] += 0.05
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        return [v / norm for v in values]

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        self.calls += len(texts)
        out = []
        for text in texts:
            packed = array.array("f", self.vector(text))
            if sys.byteorder == "big":
                packed.byteswap()
            out.append(packed.tobytes())
        return out
