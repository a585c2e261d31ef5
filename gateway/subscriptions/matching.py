"""Whether a trigger matches a subscription's patterns, and why.

`topic` is a semantic query. With an `Embedder`, the text must be closer to the topic than to
any of a few everyday subjects (`ANCHORS`), by `TOPIC_MARGIN`, and its cosine with the topic must
reach `topic_threshold`. The margin is what decides: the local model's cosines sit between about
0.75 and 0.9 for any two texts, so a threshold alone (0.5 by default) let every message match
every topic; measured on 18 messages about 6 topics and 5 others (120 wrong pairs), raw cosines
of right and wrong pairs overlapped (0.78-0.90 against 0.76-0.82), the margin rule matched 14
of the 18 right pairs and 1 of the 120 wrong ones (the rule and the margin were chosen on that
small set: development figures, not a blind measurement). An anchor as close as 0.9 to the topic
itself (the topic "travel" and the anchor "travel and hotels") is left out for it. Without an
embedder, most of the query's words (three letters or more) must occur in the text.

`entity` is a regular expression searched in the text, or any of its keywords as a whole word
(case-insensitive). `document` is a glob of document paths and matches only a
document's path (the `document_changed` trigger). Compiled regexes and query vectors are cached
per pattern text. The best match by priority is the one reported.

An entity's expression runs on the `regex` engine with a time limit (`SEARCH_TIMEOUT_S`): a
pattern that backtracks without end on some text (`(a+)+$` on a long run of "a") counts as
no match there, and is logged once, instead of holding the event loop (and every chat) for
minutes. The schema compiles patterns with the same engine, so what is accepted is what runs.
"""

from __future__ import annotations

import array
import fnmatch
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import regex

from gateway.core.embedding import Embedder

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w{3,}", re.UNICODE)
# Everyday subjects a topic must beat: a message matches a topic it is nearer to than to these.
ANCHORS = (
    "cooking and recipes", "sports results", "weather forecast", "personal finance and taxes",
    "music and concerts", "health and fitness", "travel and hotels", "software bugs",
    "office meetings", "movies and TV series", "cars and repairs", "pets and animals", "history",
    "shopping and prices", "family and children", "jobs and careers", "science news",
    "home repairs", "politics", "programming languages",
)  # fmt: skip
TOPIC_MARGIN = 0.01
SAME_SUBJECT = 0.9  # an anchor this close to the topic is the topic itself: not a rival
SEARCH_TIMEOUT_S = 0.05  # per pattern and text


class PatternType(StrEnum):
    TOPIC = "topic"
    ENTITY = "entity"
    DOCUMENT = "document"


@dataclass(frozen=True, slots=True)
class Match:
    type: PatternType
    pattern: str
    priority: int
    reason: str


def _cosine(a: bytes, b: bytes) -> float:
    x, y = array.array("f"), array.array("f")
    x.frombytes(a)
    y.frombytes(b)
    return float(sum(p * q for p, q in zip(x, y, strict=False)))


def words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _has_word(keyword: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(keyword)}(?!\w)", text, re.IGNORECASE) is not None


def glob_matches(glob: str, path: str) -> bool:
    return fnmatch.fnmatchcase(path, glob) or fnmatch.fnmatchcase(path, f"*/{glob}")


@dataclass(slots=True)
class _Seen:
    """A text being matched: its vector and cosines with the anchors, once worked out."""

    text: str
    vector: bytes | None = None
    anchors: list[float] = field(default_factory=list)


class Matcher:
    def __init__(self, embedder: Embedder | None, topic_threshold: float) -> None:
        self.embedder = embedder
        self.topic_threshold = topic_threshold
        self._regexes: dict[str, Any] = {}  # pattern -> regex.Pattern
        self._vectors: dict[str, bytes] = {}
        self._anchors: list[bytes] = []  # ANCHORS' vectors, once embedded
        self._rivals: dict[str, list[int]] = {}  # topic -> the anchors it must beat (indices)
        self._slow: set[str] = set()  # patterns that have hit the time limit (logged once)

    def _search(self, pattern: str, text: str) -> Any:
        """`regex.Match` of `pattern` in `text`, or None (also when it takes too long)."""
        compiled = self._regexes.get(pattern)
        if compiled is None:
            compiled = self._regexes[pattern] = regex.compile(pattern)
        try:
            return compiled.search(text, timeout=SEARCH_TIMEOUT_S)
        except TimeoutError:
            if pattern not in self._slow:
                self._slow.add(pattern)
                log.warning(
                    "subscription pattern %r took over %.0f ms on a %d-character text and was "
                    "counted as no match (nested repetition such as (a+)+ backtracks without "
                    "end); reported once", pattern[:80], SEARCH_TIMEOUT_S * 1000, len(text),
                )  # fmt: skip
            return None

    async def _about(self, query: str, seen: _Seen) -> bool:
        """Whether `seen.text` is about the topic `query`. The text's vector and its cosines
        with the anchors are worked out once per call of `text`, whatever its topics."""
        embedder = self.embedder
        if embedder is None:
            wanted = words(query)
            return bool(wanted) and len(wanted & words(seen.text)) / len(wanted) >= 0.5
        vector = self._vectors.get(query)
        if vector is None:
            if not self._anchors:
                self._anchors = await embedder.embed(list(ANCHORS), query=True)
            [vector] = await embedder.embed([query], query=True)
            self._vectors[query] = vector
            self._rivals[query] = [
                n for n, a in enumerate(self._anchors) if _cosine(vector, a) < SAME_SUBJECT
            ]
        if seen.vector is None:
            [seen.vector] = await embedder.embed([seen.text], query=False)
            seen.anchors = [_cosine(a, seen.vector) for a in self._anchors]
        score = _cosine(vector, seen.vector)
        rival = max((seen.anchors[n] for n in self._rivals[query]), default=-1.0)
        return score >= self.topic_threshold and score > rival + TOPIC_MARGIN

    async def text(self, patterns: Sequence[dict[str, Any]], text: str) -> Match | None:
        """The best pattern matching a message's or a memory's text, or None."""
        found: list[Match] = []
        seen = _Seen(text)
        for p in patterns:
            kind, pattern, priority = p["type"], p["pattern"], int(p.get("priority", 1))
            if kind == PatternType.TOPIC:
                if await self._about(pattern, seen):
                    reason = f"the conversation is about “{pattern[:60]}”"
                    found.append(Match(PatternType.TOPIC, pattern, priority, reason))
            elif kind == PatternType.ENTITY:
                hit = self._search(pattern, text)
                keyword = next((k for k in p.get("keywords", ()) if _has_word(k, text)), None)
                if hit is not None or keyword is not None:
                    what = keyword if keyword is not None else hit.group(0)[:60] if hit else ""
                    reason = f"“{what}” was mentioned"
                    found.append(Match(PatternType.ENTITY, pattern, priority, reason))
        return max(found, key=lambda m: m.priority, default=None)

    def document(self, patterns: Sequence[dict[str, Any]], path: str, title: str) -> Match | None:
        """The best pattern matching a changed document (its path, or its title for entities)."""
        found: list[Match] = []
        for p in patterns:
            kind, pattern, priority = p["type"], p["pattern"], int(p.get("priority", 1))
            if kind == PatternType.DOCUMENT and glob_matches(pattern, path):
                reason = f"{path} matches {pattern[:60]} and changed"
                found.append(Match(PatternType.DOCUMENT, pattern, priority, reason))
            elif kind == PatternType.ENTITY and self._search(pattern, title) is not None:
                reason = f"“{title[:60]}” changed"
                found.append(Match(PatternType.ENTITY, pattern, priority, reason))
        return max(found, key=lambda m: m.priority, default=None)
