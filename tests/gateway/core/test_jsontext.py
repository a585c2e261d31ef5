"""Outside JSON parsed with limits: every bad input is a `BadJson` with a short reason."""

from __future__ import annotations

import pytest

from gateway.core.jsontext import BadJson, depth, parse_json


def test_values_within_the_limits_parse() -> None:
    assert parse_json(b'{"a": [1, {"b": "[[[{{{"}]}', max_depth=3) == {"a": [1, {"b": "[[[{{{"}]}
    assert parse_json("[]", max_depth=1) == []
    assert parse_json("7", max_depth=0) == 7


def test_depth_counts_arrays_and_objects_without_recursion() -> None:
    assert depth(1) == 0
    assert depth({"a": [1, [2]], "b": {}}) == 3
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert depth(deep) == 100_001


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 8"),  # no RecursionError
        (b"[" * 100_000, "nested deeper than 8"),
        (b"[[[[[[[[[1]]]]]]]]]", "nested deeper than 8"),
        (b'{"a": NaN}', "not valid JSON"),
        (b"[Infinity]", "not valid JSON"),
        (b"{bad", "not valid JSON (line 1, column 2)"),
        (b"", "not valid JSON"),
        (b"\xff\xfe[]", "not UTF-8"),
        (b'["\\ud800"]', "lone surrogate"),
        (b"1" * 5000, "not valid JSON"),  # beyond Python's integer-digits limit
    ],
)
def test_bad_json_is_one_error_with_a_reason(text: bytes, reason: str) -> None:
    with pytest.raises(BadJson, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_json(text, max_depth=8)
