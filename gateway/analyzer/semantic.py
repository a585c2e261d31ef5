"""The semantic side of the context analyzer: message vectors, topic similarity, complaints.

A message is embedded once (through the `Embedder` port, which the composition root fills
with the local model when the `semantic` extra is installed) and its vector is kept in the
session's analyzer state, so each later message costs one embedding, not one per recent
message. Vectors are stored quantised to int8 and base64-encoded (512 characters for 384
dimensions instead of about 8 KB of JSON floats); the cosine error this adds is below 0.005.

- `topic_similarity`: the mean of two cosines of the new message: to the normalised mean of
  the recent user messages' vectors, and to the nearest of them (on the development sets the
  mix separated new subjects from follow-ups better than either alone).
- `complaint_similarity`: the best cosine to a small set of generic complaints about the
  conversation, in several languages (`COMPLAINTS`), written as general phrasings rather
  than taken from any evaluation case.

`SemanticSide` wraps the embedder: when it is missing or fails, every call returns None and the
analyzer falls back to its lexical rules; a failure is logged once per process, not per
message. Given an `EmbedShare` (`share.py`), it charges each message's embedding to it and
tells the analyzer whether another may be embedded now (`admit`).
"""

from __future__ import annotations

import base64
import logging
import math
import struct
from collections.abc import Sequence
from itertools import repeat
from operator import mul, truediv

from gateway.analyzer.share import EmbedShare
from gateway.core.embedding import MAX_QUERY_CHARS, Embedder

log = logging.getLogger(__name__)

# One unit of the int8 code (vectors are unit length: no component exceeds 1).
_SCALE = 127.0
# Long messages are cut before embedding: the model sees 512 tokens at a time, and the opening
# of a message carries its subject (the same cut as every query: one vector per message).
MAX_EMBED_CHARS = MAX_QUERY_CHARS

COMPLAINTS = (
    "you are not listening to me",
    "that is not what I asked",
    "you misunderstood me again",
    "you keep repeating the same wrong answer",
    "I already told you that, read my message again",
    "this conversation is going nowhere, let us start over",
    "forget everything and reset the conversation",
    "you are confused and mixing things up",
    "du hörst mir nicht zu, das habe ich nicht gefragt",
    "tu ne m'écoutes pas, ce n'est pas ce que j'ai demandé",
    "no me estás escuchando, eso no es lo que pregunté",
    "non mi ascolti, non è quello che ho chiesto",
    "você não está me ouvindo, não foi isso que eu perguntei",
    "ты меня не слушаешь, я не об этом спрашивал",
    "je luistert niet, dat is niet wat ik vroeg",
)


def pack(values: Sequence[float]) -> str:
    """A unit vector as base64 of its int8 code."""
    codes = list(map(round, map(mul, values, repeat(_SCALE))))
    try:
        code = struct.pack(f"{len(codes)}b", *codes)
    except struct.error:  # a component beyond ±1: not quite a unit vector, clamp it
        code = bytes(max(-127, min(127, c)) & 0xFF for c in codes)
    return base64.b64encode(code).decode("ascii")


def unpack(text: str) -> tuple[float, ...] | None:
    """The stored code back as a unit vector; None when it is not one of ours."""
    try:
        code = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    if not code:
        return None
    values = struct.unpack(f"{len(code)}b", code)
    return _unit(values)


def floats(vector: bytes) -> tuple[float, ...]:
    """A float32 little-endian vector from the embedder, as Python floats."""
    return struct.unpack(f"<{len(vector) // 4}f", vector)


def _unit(values: Sequence[float]) -> tuple[float, ...] | None:
    norm = math.sqrt(sum(map(mul, values, values)))
    if norm == 0.0:
        return None
    return tuple(map(truediv, values, repeat(norm)))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    # map(mul) rather than a generator: the same sum, a third of the time (it runs once per
    # complaint and recent message for every message embedded, on the event loop's thread).
    if len(a) != len(b):
        raise ValueError("vectors of different dimensions")
    total: float = sum(map(mul, a, b))
    return total


def topic_similarity(vector: Sequence[float], recent: Sequence[Sequence[float]]) -> float | None:
    """How close the message is to the session's recent messages: the mean of its cosine to
    their mean direction and to the nearest one. None without comparable vectors."""
    usable = [r for r in recent if len(r) == len(vector)]
    if not usable:
        return None
    centre = _unit([sum(column) for column in zip(*usable, strict=True)])
    if centre is None:
        return None
    nearest = max(cosine(vector, r) for r in usable)
    return (cosine(vector, centre) + nearest) / 2


# model name -> the complaints' vectors: embedded once per process, whatever the number of
# apps (or tests) that open an embedder of the same model.
_COMPLAINT_VECTORS: dict[str, list[tuple[float, ...]]] = {}


async def _complaint_vectors(embedder: Embedder) -> list[tuple[float, ...]]:
    known = _COMPLAINT_VECTORS.get(embedder.model)
    if known is None:
        known = [floats(v) for v in await embedder.embed(COMPLAINTS, query=True)]
        _COMPLAINT_VECTORS[embedder.model] = known
    return known


class SemanticSide:
    """The analyzer's use of an `Embedder`, or nothing when there is none or it fails."""

    def __init__(self, embedder: Embedder | None, share: EmbedShare | None = None) -> None:
        self.embedder = embedder
        self.share = share
        self._complaints: list[tuple[float, ...]] | None = None
        self._failed_once = False

    @property
    def model(self) -> str | None:
        return None if self.embedder is None else self.embedder.model

    def admit(self) -> bool:
        """May a message be embedded now (the share of embedding time is not spent)?"""
        return self.share is None or self.share.admit()

    async def embed(self, text: str) -> tuple[float, ...] | None:
        """The message's unit vector, or None (no embedder, nothing to embed, or a failure).
        Its duration is charged to the share (the complaints' one-off embedding is not)."""
        if self.embedder is None or not text.strip():
            return None
        try:
            if self._complaints is None:
                self._complaints = await _complaint_vectors(self.embedder)
            share = self.share
            started = share.now() if share is not None else 0.0
            try:
                (vector,) = await self.embedder.embed([text[:MAX_EMBED_CHARS]], query=True)
            finally:
                if share is not None:
                    share.charge(share.now() - started)
        except Exception as exc:  # any failure of the optional model: lexical rules instead
            if not self._failed_once:
                self._failed_once = True
                log.warning(
                    "analyzer embeddings unavailable (%s); using the lexical rules",
                    type(exc).__name__,
                )
            return None
        return floats(vector)

    def complaint_similarity(self, vector: Sequence[float]) -> float | None:
        if not self._complaints:
            return None
        return max(cosine(vector, c) for c in self._complaints if len(c) == len(vector))
