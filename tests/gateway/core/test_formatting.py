from __future__ import annotations

import pytest

from gateway.core.formatting import split_text, to_plain, utf16_len


def test_to_plain() -> None:
    md = "# Title\n**bold** and _it_ and `code` and [link](https://x.org)\n```py\nx = 1\n```"
    assert to_plain(md) == "Title\nbold and it and code and link (https://x.org)\nx = 1"
    assert to_plain("snake_case_name stays") == "snake_case_name stays"
    assert to_plain("2 * 3 * 4") == "2 * 3 * 4"


def test_split_prefers_paragraphs_then_lines_then_words() -> None:
    text = "a" * 5 + "\n\n" + "b" * 5
    assert split_text(text, 8) == ["aaaaa", "bbbbb"]
    assert split_text("one two three four", 9) == ["one two", "three", "four"]
    assert split_text("x" * 10, 4) == ["xxxx", "xxxx", "xx"]
    assert split_text("short", 100) == ["short"]
    assert split_text("", 10) == [""]


def test_split_with_utf16_measure_never_breaks_a_surrogate_pair() -> None:
    text = "😀" * 5  # two UTF-16 units each
    chunks = split_text(text, 4, utf16_len)
    assert chunks == ["😀😀", "😀😀", "😀"]
    assert all(utf16_len(c) <= 4 for c in chunks)


def test_split_rejects_a_non_positive_limit() -> None:
    with pytest.raises(ValueError, match="positive"):
        split_text("x", 0)
