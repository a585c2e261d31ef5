"""Nearest chunks by cosine similarity, over the cached embeddings of every live chunk.

The vectors are loaded from the vault once per index generation (the indexer bumps it when a
document changes) and kept as one matrix: a query is one matrix-vector product, a few
milliseconds for tens of thousands of chunks. numpy comes with the `semantic` extra; without it
(a test's fake embedder) the same arithmetic runs in plain Python, fine for small indexes.
Scope is applied before ranking, so a chunk the chat may not see never takes a place.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

try:
    import numpy as np

    HAVE_NUMPY = True
except ImportError:  # the semantic extra is not installed
    HAVE_NUMPY = False


@dataclass(frozen=True, slots=True)
class VectorHit:
    chunk: int
    document: int
    similarity: float


def _floats(blob: bytes) -> array.array[float]:
    values = array.array("f")
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return values


class VectorIndex:
    def __init__(self, rows: Sequence[Any], dim: int) -> None:
        """`rows`: (chunk, document, scope, vector) as the vault returns them."""
        self.chunks = [int(r["chunk"]) for r in rows]
        self.documents = [int(r["document"]) for r in rows]
        self.scopes = [r["scope"] for r in rows]
        self.dim = dim
        blobs = [bytes(r["vector"]) for r in rows if len(r["vector"]) == dim * 4]
        if len(blobs) != len(rows):
            raise ValueError("a cached vector has the wrong size for this model")
        if HAVE_NUMPY:
            data = b"".join(blobs)
            self._matrix: Any = np.frombuffer(data, dtype="<f4").reshape(len(rows), dim)
        else:
            self._matrix = [_floats(b) for b in blobs]

    def __len__(self) -> int:
        return len(self.chunks)

    def search(self, query: bytes, visible: Collection[str], limit: int) -> list[VectorHit]:
        if not self.chunks:
            return []
        allowed = [i for i, s in enumerate(self.scopes) if s is None or s in visible]
        if HAVE_NUMPY:
            q = np.frombuffer(query, dtype="<f4")
            sims = self._matrix @ q
            if len(allowed) != len(self.chunks):
                mask = np.full(len(self.chunks), -2.0, dtype="<f4")
                mask[allowed] = 0.0
                sims = sims + mask
            order = np.argsort(-sims)[:limit]
            scored = [(int(i), float(sims[i])) for i in order if sims[i] > -1.5]
        else:
            qv = _floats(query)
            pairs = [
                (i, sum(a * b for a, b in zip(self._matrix[i], qv, strict=True))) for i in allowed
            ]
            pairs.sort(key=lambda p: -p[1])
            scored = pairs[:limit]
        return [VectorHit(self.chunks[i], self.documents[i], s) for i, s in scored]
