"""The `Embedder` port: text in, unit-length vectors out.

Knowledge retrieval, suggestions and the analyzer share it. A vector is `dim` little-endian
float32 values packed as bytes (what the vault stores and what numpy reads without a copy),
L2-normalised so a dot product is the cosine. Queries and passages are embedded differently by
some models (e5 prefixes them), hence `query`. Implementations run the model off the event loop;
`model` names the model and its version, so cached vectors of another model are never mixed in.
A query text is cut at `MAX_QUERY_CHARS` by every consumer that embeds one (the model reads 512
tokens at a time, and the opening of a message carries its subject), so the same message gives
the same vector — and the same cache entry — wherever it is embedded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

MAX_QUERY_CHARS = 2000


class Embedder(Protocol):
    @property
    def model(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        """One vector per text, in order."""
