"""Nearest chunks by cosine similarity, over the cached embeddings of every live chunk.

The vectors are loaded from the vault once per index generation (the indexer bumps it when a
document changes) and kept as one matrix: a query is one matrix-vector product, a few
milliseconds for tens of thousands of chunks. numpy comes with the `semantic` extra; without it
(a test's fake embedder) the same arithmetic runs in plain Python, fine for small indexes.
Scope is applied before ranking, so a chunk the chat may not see never takes a place.
`blend` makes one query vector of several (a message and the ones before it).
"""

from __future__ import annotations

import array
import logging
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

try:
    import numpy as np

    HAVE_NUMPY = True
except ImportError:  # the semantic extra is not installed
    HAVE_NUMPY = False

if HAVE_NUMPY:
    # One BLAS thread. numpy's OpenBLAS splits a product this size over every core, and after
    # each one its helper thread spins for a while on the core it took: a whole core, each
    # search, that the model's second thread and the event loop then wait for (measured: the
    # model judged the machine busy on every call, semantic p99 57-75 ms; with one BLAS thread,
    # two model threads on nearly every call and p99 45-52 ms in the same hour). The product
    # itself takes about a millisecond on one thread. This is the process's setting from here
    # on.
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    except ImportError:  # numpy without the extra's other parts: BLAS keeps its threads
        pass
    except Exception:  # an odd BLAS build must not take retrieval down with it
        logging.getLogger(__name__).warning(
            "could not keep numpy's BLAS on one thread; searches may keep a core busy",
            exc_info=True,
        )


def blend(vectors: Sequence[bytes], weights: Sequence[float]) -> bytes:
    """The weighted mean of unit vectors, renormalised to unit length (same byte format)."""
    if HAVE_NUMPY:
        rows = np.stack([np.frombuffer(v, dtype="<f4") for v in vectors])
        mean = np.asarray(weights, dtype="<f4") @ rows
        norm = float(np.linalg.norm(mean))
        return bytes((mean / norm if norm > 0 else mean).astype("<f4").tobytes())
    columns = zip(*(_floats(v) for v in vectors), strict=True)
    values = [sum(w * x for w, x in zip(weights, c, strict=True)) for c in columns]
    norm = sum(x * x for x in values) ** 0.5 or 1.0
    out = array.array("f", (x / norm for x in values))
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


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
        self._rows_of: dict[int, list[int]] | None = None  # document -> its rows, when asked
        self._scoped: dict[str, list[int]] = {}  # scope -> its rows (unscoped rows are in none)
        for i, scope in enumerate(self.scopes):
            if scope is not None:
                self._scoped.setdefault(scope, []).append(i)
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

    def closest(self, query: bytes, documents: Collection[int]) -> dict[int, float]:
        """Each of `documents`' best similarity to `query` (over its chunks; a document with
        no vector is left out)."""
        if self._rows_of is None:
            self._rows_of = {}
            for i, document in enumerate(self.documents):
                self._rows_of.setdefault(document, []).append(i)
        rows = [i for d in set(documents) for i in self._rows_of.get(d, ())]
        if not rows:
            return {}
        if HAVE_NUMPY:
            sims = [float(x) for x in self._matrix[rows] @ np.frombuffer(query, dtype="<f4")]
        else:
            qv = _floats(query)
            sims = [sum(a * b for a, b in zip(self._matrix[i], qv, strict=True)) for i in rows]
        best: dict[int, float] = {}
        for i, sim in zip(rows, sims, strict=True):
            document = self.documents[i]
            best[document] = max(best.get(document, -1.0), sim)
        return best

    def search(self, query: bytes, visible: Collection[str], limit: int) -> list[VectorHit]:
        if not self.chunks:
            return []
        hidden = [i for scope, rows in self._scoped.items() if scope not in visible for i in rows]
        if HAVE_NUMPY:
            sims = self._matrix @ np.frombuffer(query, dtype="<f4")
            if hidden:
                sims[hidden] = -2.0  # below any cosine: never ranked
            # The best `limit` by a partial sort (a full sort of every chunk costs more than
            # the product): every row scoring at least the limit-th score, sorted, equal
            # scores in row order, then cut.
            top = np.arange(len(sims))
            if 0 < limit < len(sims):
                least = sims[np.argpartition(-sims, limit - 1)[limit - 1]]
                top = np.flatnonzero(sims >= least)
            top = top[np.lexsort((top, -sims[top]))][: max(limit, 0)]
            scored = [(int(i), float(sims[i])) for i in top if sims[i] > -1.5]
        else:
            qv = _floats(query)
            shut = set(hidden)
            pairs = [
                (i, sum(a * b for a, b in zip(self._matrix[i], qv, strict=True)))
                for i in range(len(self.chunks))
                if i not in shut
            ]
            pairs.sort(key=lambda p: -p[1])
            scored = pairs[:limit]
        return [VectorHit(self.chunks[i], self.documents[i], s) for i, s in scored]
