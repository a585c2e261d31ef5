"""Keywords of a message and their overlap with the session's recent ones: the lexical rules.

This is what the analyzer uses when there are no embeddings (the `semantic` extra is not
installed, or the model failed), and it is measured as the weaker mode. Keywords are Unicode
word tokens, casefolded, stopwords of several languages removed, possessives and elisions cut
("sister's", "l'entretien"), a number's unit kept ("16gb" -> "gb"), deduplicated; runs of
Han/Kana characters become bigrams. Overlap compares light stems (`lexicon.stem`), each
keyword weighted by informativeness (everyday words count half); a long German-style compound
that contains a recent stem counts as shared. There is no list of topic fields: a word is
linked to the session only by the session's own words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gateway.analyzer.lexicon import STOPWORDS, stem, weight

_TOKEN = re.compile(r"\w+(?:['’]\w+)*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA_ONLY = re.compile(r"^[\u3040-\u309f]+$")
# "16gb", "512mi", "x-t30": the unit or name part of a number-and-letters token.
_NUMBER_UNIT = re.compile(r"^\d+(?:[.,]\d+)?([^\W\d_]{2,})$")
# German-style compounds are checked for a recent stem inside them from this length on.
COMPOUND_MIN = 9


def keywords(text: str) -> tuple[str, ...]:
    """Content words of a message, casefolded, stopwords removed, first occurrence order."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text.casefold().replace("’", "'")):
        if _CJK.search(token):
            for gram in _cjk_bigrams(token):
                seen.setdefault(gram, None)
            continue
        if token[0].isdigit():
            unit = _NUMBER_UNIT.match(token)
            if unit is None:
                continue
            token = unit.group(1)
        if "'" in token and token not in STOPWORDS:
            token = _unelide(token)
        if len(token) > 1 and token not in STOPWORDS:
            seen.setdefault(token, None)
    return tuple(seen)


_CLITICS = frozenset(("s", "t", "re", "ve", "ll", "d", "m"))


def _unelide(token: str) -> str:
    """Possessives and elisions off: "sister's" -> "sister", "l'entretien" -> "entretien"."""
    head, _, tail = token.partition("'")
    if tail in _CLITICS:
        return head
    return tail if len(head) <= 4 else head


def _cjk_bigrams(run: str) -> Iterable[str]:
    if len(run) == 1:
        return ()
    grams = (run[i : i + 2] for i in range(len(run) - 1))
    return [g for g in grams if not _KANA_ONLY.match(g)]


# Past this many keywords a message is not penalised for its extra detail words.
OVERLAP_CAP = 5


def overlap(message: Sequence[str], recent_stems: frozenset[str]) -> float:
    """How much of the message's keywords the session used recently, 0.0 to 1.0.

    Each keyword counts by its informativeness. The denominator is capped at `OVERLAP_CAP`:
    one shared keyword in a long, detailed message is as much a link as in a short one.
    """
    if not message:
        return 1.0
    hits = total = 0.0
    for word in message:
        key = stem(word)
        share = weight(key)
        total += share
        if key in recent_stems or _in_compound(word, recent_stems):
            hits += share
    return min(1.0, hits / min(total, OVERLAP_CAP))


def recent_stems(recent: Iterable[Iterable[str]]) -> frozenset[str]:
    return frozenset(stem(w) for message in recent for w in message)


def _in_compound(word: str, stems: frozenset[str]) -> bool:
    """Does a long compound ("luftentfeuchter") contain a recent stem ("feuch")?"""
    if len(word) < COMPOUND_MIN:
        return False
    return any(len(key) == 5 and key in word for key in stems)
