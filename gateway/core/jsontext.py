"""JSON from outside (webhooks, the admin API) parsed with limits, so bad input is a clear
`ValueError` and never something else.

`json.loads` alone recurses per nesting level (100,000 `[` is a `RecursionError`, which
handlers that map `ValueError` to a 400 turn into a 500), accepts `NaN` and `Infinity` (not
JSON), and keeps lone surrogates from `\\ud800` escapes (which SQLite cannot store). Both the
Slack route and the admin API parse through `parse_json` and answer 400 with its message.
"""

from __future__ import annotations

import json
from typing import Any


class BadJson(ValueError):
    """The text is not JSON we take; the message says why, in a few words."""


def parse_json(text: str | bytes, *, max_depth: int) -> Any:
    """The value of UTF-8 JSON `text`, nested at most `max_depth` arrays/objects deep."""
    try:
        decoded = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError:
        raise BadJson("not UTF-8 text") from None
    try:
        value = json.loads(decoded, parse_constant=_no_constant)
    except RecursionError:
        raise BadJson(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        at = f" (line {line}, column {getattr(exc, 'colno', '?')})" if line else ""
        raise BadJson(f"not valid JSON{at}") from None
    if depth(value) > max_depth:
        raise BadJson(f"nested deeper than {max_depth} levels")
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise BadJson("a string holds a lone surrogate escape") from None
    return value


def depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed value (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in item)
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
