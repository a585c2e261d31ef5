"""Splitting a document into chunks: at headings first, then at paragraphs, within a budget.

A chunk is a section under its heading path ("Runbook: failover › Promote"), so a search hit
says where in the document it is and the heading words count for retrieval. A section over the
budget is split at blank lines; a paragraph over the budget is cut at the budget (never
dropped: every byte of a document is in exactly one chunk). A heading with no text of its own
travels with the section after it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gateway.agent.context import estimate_tokens
from gateway.knowledge.markdown import headings

SEPARATOR = " › "


@dataclass(frozen=True, slots=True)
class Chunk:
    heading: str
    text: str

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)

    @property
    def hash(self) -> str:
        return hashlib.sha256(f"{self.heading}\n{self.text}".encode()).hexdigest()


def _sections(title: str, body: str) -> list[tuple[str, str]]:
    lines = body.split("\n")
    marks = headings(body)
    sections: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    starts = [index for index, _, _ in marks]
    if not starts or starts[0] > 0:
        sections.append((title, "\n".join(lines[: starts[0] if starts else len(lines)])))
    for n, (index, level, text) in enumerate(marks):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text))
        path = [t for _, t in stack]
        if path[0] != title:
            path.insert(0, title)
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        sections.append((SEPARATOR.join(path), "\n".join(lines[index:end])))
    return sections


def _split(text: str, max_tokens: int) -> list[str]:
    """Pieces of `text` within the budget, cut at blank lines where possible."""
    if estimate_tokens(text) <= max_tokens:
        return [text]
    limit = max_tokens * 4
    pieces: list[str] = []
    current = ""
    for paragraph in text.split("\n\n"):
        candidate = f"{current}\n\n{paragraph}" if current else paragraph
        if len(candidate) <= limit:
            current = candidate
            continue
        if current:
            pieces.append(current)
        while len(paragraph) > limit:
            pieces.append(paragraph[:limit])
            paragraph = paragraph[limit:]
        current = paragraph
    if current:
        pieces.append(current)
    return pieces


def chunk(title: str, body: str, max_tokens: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    carried = ""
    for heading, text in _sections(title, body):
        text = f"{carried}\n{text}".strip("\n") if carried else text.strip("\n")
        carried = ""
        if not text.strip():
            continue
        if all(line.lstrip().startswith("#") for line in text.split("\n") if line.strip()):
            carried = text  # headings alone: they belong to what follows
            continue
        chunks.extend(Chunk(heading, piece) for piece in _split(text, max_tokens))
    if carried:
        chunks.append(Chunk(title, carried))
    return chunks
