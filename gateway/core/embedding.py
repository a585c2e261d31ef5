"""The `Embedder` port: text in, unit-length vectors out.

Knowledge retrieval, suggestions and the analyzer share it. A vector is `dim` little-endian
float32 values packed as bytes (what the vault stores and what numpy reads without a copy),
L2-normalised so a dot product is the cosine. Queries and passages are embedded differently by
some models (e5 prefixes them), hence `query`. Implementations run the model off the event loop;
`model` names the model and its version, so cached vectors of another model are never mixed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Embedder(Protocol):
    @property
    def model(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        """One vector per text, in order."""
