"""Markdown -> Telegram HTML and Slack mrkdwn: escaping first, then the supported markup only."""

from __future__ import annotations

from gateway.core.formatting import split_text, to_mrkdwn, to_plain, to_telegram_html, utf16_len


def test_html_escapes_and_formats() -> None:
    assert (
        to_telegram_html("**b** *i* ~~s~~ a<b & c>d")
        == "<b>b</b> <i>i</i> <s>s</s> a&lt;b &amp; c&gt;d"
    )


def test_html_links_and_headings() -> None:
    assert to_telegram_html("# Title") == "<b>Title</b>"
    html = to_telegram_html('[docs](https://x.org/?a=1&b="2")')
    assert html == '<a href="https://x.org/?a=1&amp;b=%222%22">docs</a>'


def test_html_code_is_escaped_and_not_formatted() -> None:
    assert to_telegram_html("`a<**b**>`") == "<code>a&lt;**b**&gt;</code>"
    fenced = to_telegram_html("```py\nif a < b:\n    x = **y**\n```")
    assert fenced == '<pre><code class="language-py">if a &lt; b:\n    x = **y**</code></pre>'


def test_html_unclosed_fence_from_a_split_still_parses() -> None:
    assert to_telegram_html("```\nhalf <code>") == "<pre><code>half &lt;code&gt;</code></pre>"


def test_html_never_lets_raw_tags_through() -> None:
    assert "<script>" not in to_telegram_html("<script>alert(1)</script> **x**")


def test_mrkdwn_escapes_only_three_characters() -> None:
    assert to_mrkdwn("a < b > c & d \"q\" 'r'") == "a &lt; b &gt; c &amp; d \"q\" 'r'"


def test_mrkdwn_markup() -> None:
    assert to_mrkdwn("**bold** and *it* and ~~gone~~") == "*bold* and _it_ and ~gone~"
    assert to_mrkdwn("**a *b* c**") == "*a _b_ c*"
    assert to_mrkdwn("## Heading") == "*Heading*"
    assert to_mrkdwn("[site](https://x.org)") == "<https://x.org|site>"


def test_mrkdwn_code_keeps_its_content() -> None:
    assert to_mrkdwn("`x *y* <z>`") == "`x *y* &lt;z&gt;`"
    assert to_mrkdwn("```\na **b**\n```") == "```\na **b**\n```"


def test_a_link_address_is_never_formatted() -> None:
    url = "https://example.com/_build_/a*b*c/~~x~~/index.html"
    md = f"see [the docs]({url}) _now_"
    assert to_telegram_html(md) == f'see <a href="{url}">the docs</a> <i>now</i>'
    assert to_mrkdwn(md) == f"see <{url}|the docs> _now_"
    assert to_plain(md) == f"see the docs ({url}) now"
    assert to_telegram_html("[`x`](https://x.org)") == '<a href="https://x.org"><code>x</code></a>'


def test_double_underscores_inside_a_word_are_no_markup() -> None:
    assert to_telegram_html("call __init__ and a__b__c") == "call __init__ and a__b__c"
    assert to_telegram_html("__in bold__ and **bold**") == "<b>in bold</b> and <b>bold</b>"
    assert to_mrkdwn("call __init__, __in bold__") == "call __init__, *in bold*"
    assert to_plain("call __init__") == "call __init__"


def test_a_bare_hash_line_does_not_make_the_next_line_a_heading() -> None:
    assert to_telegram_html("#\n\nnext line") == "#\n\nnext line"
    assert to_plain("#\n\nnext line") == "#\n\nnext line"


def test_a_code_block_split_across_messages_stays_code_in_each() -> None:
    code = "\n".join(f"# comment {i} with *stars* and _under_" for i in range(400))
    md = f"Intro.\n\n```python\n{code}\n```\nAfter the code, *normal* text."
    chunks = split_text(md, 4096, utf16_len)
    assert len(chunks) >= 4 and all(utf16_len(c) <= 4096 for c in chunks)
    html = [to_telegram_html(c) for c in chunks]
    for part in html[1:-1]:  # wholly code: one block, nothing formatted
        assert part.startswith('<pre><code class="language-python">')
        assert part.endswith("</code></pre>") and "<b>" not in part and "<i>" not in part
    assert html[-1].endswith("</code></pre>\nAfter the code, <i>normal</i> text.")
    lines = [line for c in chunks for line in c.splitlines() if line.startswith("# comment")]
    assert lines == code.splitlines()  # every line once, in order


def test_a_code_block_split_for_slack_stays_code_in_each() -> None:
    md = "Here:\n\n```python\n" + "x = a * b * c  # _note_\n" * 250 + "```\n\nAfter the *code*."
    chunks = split_text(md, 4000, lambda c: len(to_mrkdwn(c)))
    posts = [to_mrkdwn(c) for c in chunks]
    assert len(posts) >= 2 and all(len(p) <= 4000 for p in posts)
    for post in posts[1:]:
        assert post.startswith("```\nx = a * b * c  # _note_")
    assert posts[-1].endswith("```\n\nAfter the _code_.")


def test_a_split_right_after_an_opening_fence_ends_and_keeps_each_line_whole() -> None:
    # A chunk ending just after "```lang": reopening it gave the next chunk the same text
    # again, forever (the event loop with it). Tiny limits too.
    for text, limit, measure, code in [
        ("```" + "a" * 1400 + "\n" + "b" * 12000, 4096, utf16_len, "b"),
        ("```python\n" + "x" * 100, 25, len, "x"),
        ("```\n" + "x" * 100, 7, len, "x"),
    ]:
        chunks = split_text(text, limit, measure)
        assert all(measure(c) <= limit for c in chunks)
        assert "".join(chunks).count(code) == text.count(code)  # all of it, once
    # Room for the closing fence is found at a line break, never inside a code line.
    lines = [f"w{i:03d}".ljust(10 + i % 7, "z") for i in range(1200)]
    chunks = split_text("```\n" + "\n".join(lines) + "\n```", 4096, utf16_len)
    kept = [ln for c in chunks for ln in c.splitlines() if ln and not ln.startswith("```")]
    assert kept == lines
