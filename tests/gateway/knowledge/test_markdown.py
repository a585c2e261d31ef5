"""Front matter, titles, reference keys, links and chunking: the pure reading of a document."""

from __future__ import annotations

from gateway.knowledge.chunking import chunk
from gateway.knowledge.markdown import edges, front_matter, ref_key, title_of


def test_front_matter_key_values_and_body() -> None:
    fm = front_matter('---\ntype: adr\nstatus: "accepted"\n# a comment\n\n---\n# Title\nbody')
    assert fm.fields == {"type": "adr", "status": "accepted"}
    assert fm.body == "# Title\nbody"
    assert fm.problem is None


def test_no_front_matter_is_all_body() -> None:
    assert front_matter("# Title\n---\ntext").fields == {}


def test_broken_front_matter_is_reported_not_guessed() -> None:
    unclosed = front_matter("---\ntype: adr\n# Title\n")
    assert unclosed.problem == "front matter has no closing '---'" and unclosed.fields == {}
    not_key_value = front_matter("---\ntype adr\n---\n# Title\n")
    assert not_key_value.problem == "front matter line 2 is not 'key: value'"


def test_title_is_the_first_heading_else_the_file_name() -> None:
    assert title_of("intro\n\n## Second level first\n# Later", "a/b.md") == "Second level first"
    assert title_of("no heading here", "notes/coffee-machine.txt") == "coffee-machine"
    assert title_of("```\n# not a heading\n```\ntext", "x/y.md") == "y"


def test_reference_keys_from_titles_and_file_names() -> None:
    assert ref_key("ADR 0005: Feature flags", "adr/0005-flags.md", "adr") == "adr:5"
    assert ref_key("Usage-based billing", "rfc/rfc-019-billing.md", "rfc") == "rfc:19"
    assert ref_key("Split the repo", "adr/0009-split.md", "adr") == "adr:9"
    assert ref_key("Coffee", "notes/coffee.md", "note") is None


def test_edges_from_references_and_links() -> None:
    body = (
        "See [the runbook](../runbooks/failover.md#promote) and [site](https://x.org/a.md).\n"
        "References: ADR 0001, RFC-17, [overview](../notes/overview.md)\n"
    )
    found = set(edges(body, "adr/0002.md"))
    assert found == {
        ("adr:1", "explicit", 1.0),
        ("rfc:17", "explicit", 1.0),
        ("notes/overview.md", "explicit", 1.0),
        ("runbooks/failover.md", "link", 0.6),
    }


def test_chunks_follow_headings_and_keep_every_byte() -> None:
    body = "# Doc\n\nIntro.\n\n## One\n\nAlpha.\n\n### Deep\n\nBeta.\n\n## Two\n\n" + "word " * 900
    chunks = chunk("Doc", body, max_tokens=200)
    assert [c.heading for c in chunks[:3]] == ["Doc", "Doc › One", "Doc › One › Deep"]
    assert all(c.heading == "Doc › Two" for c in chunks[3:]) and len(chunks) > 4
    assert all(c.tokens <= 201 for c in chunks)
    assert "".join(c.text for c in chunks).count("word") == 900


def test_a_heading_alone_travels_with_what_follows() -> None:
    chunks = chunk("T", "# T\n## Empty\n## Full\n\ntext", max_tokens=100)
    assert len(chunks) == 1 and chunks[0].text.startswith("# T")
