"""Formatting helpers shared by channels: markdown to plain text, and length-aware splitting.

Split first, format second: a chunk boundary must never fall inside an escape sequence or a
tag that formatting introduced. `split_text` prefers paragraph, then line, then word breaks,
and measures with a caller-supplied function (Telegram counts UTF-16 code units).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# The text excludes "[" too: from each "[" of a long run the search would rescan the rest.
_LINK = re.compile(r"\[([^\[\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"(\*\*)(?=\S)(.+?)(?<=\S)\*\*")
# `__` inside a word is no markup (`a__b__c`, as in CommonMark), nor around one identifier:
# `__init__` in a reply is Python's name far more often than a bold "init".
_BOLD_UNDER = re.compile(r"(?<!\w)(__)(?=\S)(?!\w+__(?!\w))(.+?)(?<=\S)__(?!\w)")
_ITALIC = re.compile(r"(?<![\w*])([*_])(?=\S)([^*_\n]+?)(?<=\S)\1(?![\w*])")
_CODE = re.compile(r"`([^`\n]+)`")
_HEADING = re.compile(r"^#{1,6}[^\S\n]+", re.MULTILINE)
_FENCE = re.compile(r"^```[^\n]*\n?", re.MULTILINE)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def to_plain(markdown: str) -> str:
    """Markdown to readable plain text for the terminal and as a fallback everywhere."""
    text = _FENCE.sub("", markdown.replace("\x00", ""))
    text, urls = _lift(text, _LINK, lambda m: f"{m.group(1)} ({m.group(2)})")
    text = _BOLD.sub(r"\2", text)
    text = _BOLD_UNDER.sub(r"\2", text)
    text = _ITALIC.sub(r"\2", text)
    text = _CODE.sub(r"\1", text)
    return _restore(_HEADING.sub("", text), urls).strip()


def split_text(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Split into chunks with `measure(chunk) <= limit`, at the most natural boundary; a code
    block cut in two is closed at the end of one chunk and reopened at the start of the next."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    chunks: list[str] = []
    rest = text
    while measure(rest) > limit:
        cut = _cut(rest, limit, measure)
        chunk, reopen, cut = _fenced(rest, cut, limit, measure)
        chunks.append(chunk)
        rest = (reopen or "") + rest[cut:].lstrip("\n")
    if rest.strip() or not chunks:
        chunks.append(rest)
    return [c for c in chunks if c] or [""]


def _cut(text: str, limit: int, measure: Callable[[str], int]) -> int:
    """Where a chunk of at most `limit` ends: a paragraph, line or word break if there is one
    late enough, else as much as fits."""
    cut = _fit(text, limit, measure)
    window = text[:cut]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at > cut // 3:
            return at + len(sep)
    return cut


def _fenced(
    rest: str, cut: int, limit: int, measure: Callable[[str], int]
) -> tuple[str, str | None, int]:
    """The chunk `rest[:cut]`, closed if it ends inside a code block; the fence reopening it
    (None if none is open); and the cut, moved back if the closing fence needs the room.

    Every answer leaves less text than `rest` (the reopening fence is shorter than what the
    chunk takes), so the split always ends; when that cannot be had (a limit too small for a
    fence and some code), the chunk is cut as it is."""
    for _ in range(4):  # the closing fence's room, found again at a natural break
        chunk = rest[:cut].rstrip()
        opened = _open_fence(chunk)
        if opened is None:
            return chunk, None, cut
        start, lang, body = opened
        if not body.strip() and start > 0:  # a fence and nothing yet: it starts the next one
            return rest[:start].rstrip(), None, start
        closed, reopen = chunk + "\n```", f"```{lang}\n"
        if cut <= len(reopen):
            break
        over = measure(closed) - limit
        if over <= 0:
            return closed, reopen, cut
        if limit - over <= 0:
            break
        cut = _cut(rest, limit - over, measure)
    return rest[:cut].rstrip(), None, cut


def _open_fence(chunk: str) -> tuple[int, str, str] | None:
    """(where, language, code so far) of the code block `chunk` ends inside, if it does."""
    ends = list(_FENCED.finditer(chunk))
    last = ends[-1] if ends else None
    if last is None or last.group(3):
        return None
    # A language only when the fence line ends after it: "```done" is text after a fence.
    lang = last.group(1) if _LINE_END.match(chunk, last.end(1)) else ""
    return last.start(), lang, last.group(2)


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


# --- Markdown to platform markup -------------------------------------------------------------
# Both converters take one chunk that `split_text` already cut (the markup they add is never
# counted against the limit: platforms count visible characters, which only shrink). Code is
# lifted out first so nothing inside it is treated as markup, then the rest is escaped, then
# the inline patterns (which contain no escapable characters) are rewritten.

_LINE_END = re.compile(r"[^\S\n]*(\n|\Z)")
# A code block: language, code, and its closing fence (empty when the text ends inside it).
_FENCED = re.compile(r"```([\w+-]*)[^\S\n]*\n?(.*?)(\n?```|\Z)", re.DOTALL)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING_LINE = re.compile(r"^#{1,6}[^\S\n]+(.+?)[^\S\n]*#*$", re.MULTILINE)
_SLOT = re.compile("\x00(\\d+)\x00")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _lift_code(
    text: str, fence: Callable[[str, str], str], inline: Callable[[str], str]
) -> tuple[str, list[str]]:
    slots: list[str] = []

    def keep(rendered: str) -> str:
        slots.append(rendered)
        return f"\x00{len(slots) - 1}\x00"

    text = text.replace("\x00", "")
    text = _FENCED.sub(lambda m: keep(fence(m.group(1), m.group(2))), text)
    text = _CODE.sub(lambda m: keep(inline(m.group(1))), text)
    return text, slots


def _lift(
    text: str,
    pattern: re.Pattern[str],
    render: Callable[[re.Match[str]], str],
    slots: list[str] | None = None,
) -> tuple[str, list[str]]:
    """Each match of `pattern` rendered and kept aside in `slots` (a link's address must not
    meet the inline patterns: `/_build_/` is no italic), a placeholder in its place."""
    kept = [] if slots is None else slots

    def keep(match: re.Match[str]) -> str:
        kept.append(render(match))
        return f"\x00{len(kept) - 1}\x00"

    return pattern.sub(keep, text), kept


def _restore(text: str, slots: list[str]) -> str:
    # Twice: a link's text may hold a code span lifted before it.
    for _ in range(2):
        text = _SLOT.sub(lambda m: slots[int(m.group(1))], text)
    return text


def _html_fence(lang: str, code: str) -> str:
    cls = f' class="language-{lang}"' if lang else ""
    return f"<pre><code{cls}>{_escape(code)}</code></pre>"


def to_telegram_html(markdown: str) -> str:
    """Markdown to Telegram's HTML subset (b, i, s, code, pre, a); everything else escaped."""
    text, slots = _lift_code(markdown, _html_fence, lambda c: f"<code>{_escape(c)}</code>")
    text, _ = _lift(
        _escape(text),
        _LINK,
        lambda m: f'<a href="{m.group(2).replace(chr(34), "%22")}">{m.group(1)}</a>',
        slots,
    )
    text = _HEADING_LINE.sub(r"<b>\1</b>", text)
    text = _ITALIC.sub(r"<i>\2</i>", text)
    text = _BOLD.sub(r"<b>\2</b>", text)
    text = _BOLD_UNDER.sub(r"<b>\2</b>", text)
    text = _STRIKE.sub(r"<s>\1</s>", text)
    return _restore(text, slots)


def to_mrkdwn(markdown: str) -> str:
    """Markdown to Slack mrkdwn: escape only `& < >`, then `*bold*`, `_it_`, `<url|text>`."""
    text, slots = _lift_code(
        markdown, lambda _lang, code: f"```\n{_escape(code)}\n```", lambda c: f"`{_escape(c)}`"
    )
    text, _ = _lift(
        _escape(text), _LINK, lambda m: f"<{m.group(2)}|{m.group(1).replace('|', '/')}>", slots
    )
    text = _ITALIC.sub(r"_\2_", text)
    text = _BOLD.sub(r"*\2*", text)
    text = _BOLD_UNDER.sub(r"*\2*", text)
    text = _HEADING_LINE.sub(r"*\1*", text)
    text = _STRIKE.sub(r"~\1~", text)
    return _restore(text, slots)
