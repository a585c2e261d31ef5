"""Reading a Markdown (or plain text) document: front matter, title, reference keys and links.

Front matter is the `key: value` subset of YAML between a first line `---` and the next `---`
(or `...`): that is all a document needs here (`type`, `status`, an owner, a date), and a YAML
library would accept far more than we can use, so the subset is parsed by hand and anything
outside it is reported as a problem, not guessed at. Links between documents come from
`References:` lines (`ADR 0005, RFC 017`, paths or links: kind `explicit`) and from Markdown
links to other `.md`/`.txt` files (kind `link`). Pure functions, no I/O.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

_KEY_VALUE = re.compile(r"^([A-Za-z_][\w-]*)\s*:\s*(.*?)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_REF = re.compile(r"\b(ADR|RFC)[\s_-]*0*(\d+)\b", re.IGNORECASE)
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCES = re.compile(r"^\s*references\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_DOC_SUFFIXES = (".md", ".markdown", ".txt")

EXPLICIT_WEIGHT = 1.0
LINK_WEIGHT = 0.6


@dataclass(frozen=True, slots=True)
class FrontMatter:
    fields: dict[str, str]
    body: str
    problem: str | None = None  # set when the block is broken: the fields are then empty


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def front_matter(text: str) -> FrontMatter:
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        return FrontMatter({}, text)
    fields: dict[str, str] = {}
    for number, raw in enumerate(lines[1:], start=2):
        line = raw.rstrip("\r")
        if line in ("---", "..."):
            return FrontMatter(fields, "\n".join(lines[number:]))
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _KEY_VALUE.match(line)
        if match is None:
            return FrontMatter({}, text, f"front matter line {number} is not 'key: value'")
        fields[match.group(1).lower()] = _unquote(match.group(2))
    return FrontMatter({}, text, "front matter has no closing '---'")


def headings(body: str) -> list[tuple[int, int, str]]:
    """(line index, level, text) of every ATX heading outside fenced code blocks."""
    found = []
    fenced = False
    for index, line in enumerate(body.split("\n")):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced and (match := _HEADING.match(stripped)):
            found.append((index, len(match.group(1)), match.group(2).strip()))
    return found


def title_of(body: str, path: str) -> str:
    """The first heading, else the file name without its suffix."""
    found = headings(body)
    if found:
        return found[0][2][:200]
    return posixpath.splitext(posixpath.basename(path))[0]


def ref_key(title: str, path: str, doc_type: str) -> str | None:
    """`adr:5` for "ADR 0005: …" (or a file `0005-x.md` of type adr), None otherwise."""
    stem = posixpath.splitext(posixpath.basename(path))[0]
    for text in (title, stem):
        if match := _REF.search(text):
            return f"{match.group(1).lower()}:{int(match.group(2))}"
    if doc_type in ("adr", "rfc") and (digits := re.match(r"0*(\d+)\b", stem)):
        return f"{doc_type}:{int(digits.group(1))}"
    return None


def _resolve(target: str, path: str) -> str | None:
    """A link target as a path relative to the documents' base, or None if it is no document."""
    target = target.split("#", 1)[0].split("?", 1)[0]
    if not target or "://" in target or target.startswith("mailto:"):
        return None
    if not target.lower().endswith(_DOC_SUFFIXES):
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return None if joined.startswith("..") else joined


def edges(body: str, path: str) -> list[tuple[str, str, float]]:
    """(target, kind, weight): reference keys and paths this document points to."""
    found: dict[tuple[str, str], float] = {}
    for line in _REFERENCES.findall(body):
        for match in _REF.finditer(line):
            found[(f"{match.group(1).lower()}:{int(match.group(2))}", "explicit")] = EXPLICIT_WEIGHT
        for target in _LINK.findall(line):
            if (resolved := _resolve(target, path)) is not None:
                found[(resolved, "explicit")] = EXPLICIT_WEIGHT
    for target in _LINK.findall(body):
        resolved = _resolve(target, path)
        if resolved is not None and resolved != path and (resolved, "explicit") not in found:
            found[(resolved, "link")] = LINK_WEIGHT
    return [(target, kind, weight) for (target, kind), weight in found.items()]
