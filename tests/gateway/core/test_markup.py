"""Markdown -> Telegram HTML and Slack mrkdwn: escaping first, then the supported markup only."""

from __future__ import annotations

from gateway.core.formatting import to_mrkdwn, to_telegram_html


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
