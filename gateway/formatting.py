"""Formatting helpers shared by channels: markdown to plain text, and length-aware splitting.

Split first, format second: a chunk boundary must never fall inside an escape sequence or a
tag that formatting introduced. `split_text` prefers paragraph, then line, then word breaks,
and measures with a caller-supplied function (Telegram counts UTF-16 code units).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])([*_])(?=\S)([^*_\n]+?)(?<=\S)\1(?![\w*])")
_CODE = re.compile(r"`([^`\n]+)`")
_HEADING = re.compile(r"^#{1,6}\s+", re.MULTILINE)
_FENCE = re.compile(r"^```[^\n]*\n?", re.MULTILINE)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def to_plain(markdown: str) -> str:
    """Markdown to readable plain text for the terminal and as a fallback everywhere."""
    text = _FENCE.sub("", markdown)
    text = _LINK.sub(r"\1 (\2)", text)
    text = _BOLD.sub(r"\2", text)
    text = _ITALIC.sub(r"\2", text)
    text = _CODE.sub(r"\1", text)
    return _HEADING.sub("", text).strip()


def split_text(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Split into chunks with `measure(chunk) <= limit`, at the most natural boundary."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    chunks: list[str] = []
    rest = text
    while measure(rest) > limit:
        cut = _fit(rest, limit, measure)
        window = rest[:cut]
        for sep in ("\n\n", "\n", " "):
            at = window.rfind(sep)
            if at > cut // 3:
                cut = at + len(sep)
                break
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n")
    if rest.strip() or not chunks:
        chunks.append(rest)
    return [c for c in chunks if c] or [""]


def _fit(text: str, limit: int, measure: Callable[[str], int]) -> int:
    """The longest prefix length whose measure fits (binary search; never splits a surrogate)."""
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo
