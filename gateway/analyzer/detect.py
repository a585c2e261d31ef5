"""Pure detection of frustration and topic shifts in a user message. No I/O, no state.

Runs on every chat message before the agent turn, so it is built for speed: every regex and
word list is compiled once at import; a call builds only small per-message sets.

- Frustration: phrase patterns in `gateway/analyzer/frustration.py`, after quoted text and
  code are blanked out.
- Keywords: Unicode word tokens, casefolded, stopwords of several languages removed,
  possessives and elisions cut ("sister's", "l'entretien"), a number's unit kept ("16gb" ->
  "gb"), deduplicated; runs of Han/Kana characters become bigrams.
- Topic shift: how much of the message belongs to the session's topic profile (the recent
  messages' keywords and the topic fields they fill, see `gateway/analyzer/lexicon.py`),
  each keyword weighted by informativeness, below a threshold. A shared stem is a full link,
  and so is a new word of a field the session fills ("tyre" in a cycling chat) or a compound
  containing a recent stem ("Luftentfeuchter" after "feucht"). Judged only once the session
  has two earlier messages and enough recent keywords, and only for substantive messages
  (enough informative keywords; quoted text does not count). A new subject is opened by
  asking for something, so a plain statement never counts as a shift; nor does a message
  that points back ("and what about…", "is that normal?"), a yes/no question ("Is 16 GB
  enough?"), or one that quotes somebody's words. An explicit "unrelated question" or "by the
  way" tips a weak overlap into a shift. What the word lists do not know stays ambiguous:
  that is what the optional confirmation model is for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.analyzer.frustration import complains, rx, strip_quoted
from gateway.analyzer.lexicon import STOPWORDS, field_key, fields, stem, weight

Suggestion = Literal["clear", "compact"]

_SHIFT_CUE = rx(
    r"\b(?:by the way|btw|unrelated|different (?:topic|question|subject)|new (?:topic|question)"
    r"|change of (?:topic|subject)|chang(?:e|ing) the (?:topic|subject)|switching (?:gears|topics)"
    r"|on (?:a|an) (?:different|other|unrelated|separate) (?:note|topic)|on another note"
    r"|something (?:else|completely different)|totally different|anderes thema|übrigens"
    r"|autre (?:sujet|question)|otro tema|otra pregunta|cambiando de tema|другой вопрос"
    r"|кстати)\b|ところで|話は変わ"
)
# A message that opens by pointing back continues the topic ("and what about…", "that one…").
_CONTINUATION_START = rx(
    r"^\W*(?:and|also|but|so|then|what about|how about|and if|what if|which one|same|instead"
    r"|it|its|it's|that|that's|this|these|those|they|them|there|wait|follow[- ]?up|ok so"
    r"|und|aber|dann|das|es|et|mais|alors|donc|ça|ca|y|pero|entonces|eso|esto|и|а|но|тогда)\b"
)
# Words that refer back to something already said, anywhere in the message.
_BACK_REFERENCE = rx(
    r"\b(?:it|its|it's|this|these|those|they|them|their|there|such|same|also|too|then"
    r"|instead|else|either|both|here|again|still|other|second|third|previous|above"
    r"|earlier|former|latter|dies|diese|dieser|dieses|ça|cela|ces|eso|esto|esa|ese|это|эти"
    r"|этот|эту|там|тоже|также)\b"
    # "that" only as a demonstrative ("is that normal", "for that route"), not as a relative
    # pronoun ("a function that checks").
    r"|\b(?:is|was|does|did|do|for|with|about|of|like|on|in|at|to|after|before|if|than|and)"
    r" that\b(?! (?:is|are|was|were|has|have|can|will|would|does|do)\b)"
)
# A yes/no question ("Is 16 GB enough?", "For dessert, should I…?") asks about something on
# the table;
# a request ("Can you recommend…") or a wh-question can open a new subject.
_POLAR_QUESTION = rx(
    r"^\W*(?:[^,.;:?!\n]{1,30},\s*)?(?:is|are|should|shall|would|does|do|did|must|will|has|have"
    r"|could (?!you)|can (?!you)|muss|müssen|soll|sollte|lohnt|ist|sind|kann (?!du)|est-ce"
    r"|faut-il|dois-je|sería|debería|hay|стоит|нужно|можно|надо)\b"
)
# A new subject is opened by asking for something; a plain statement ("The soil stays wet")
# adds detail to the current one.
_ASKS = rx(
    r"[?？]|(?:か|ください|教えて)\W*$"
    r"|^\W*(?:(?:can|could|would|will) you|please|pls|help|write|explain|suggest|recommend"
    r"|tell me|give me|show me|draft|translate|summari[sz]e|describe|list|compare|create|plan"
    r"|convert|find|calculate|i need|i want|i'd like|i would like|i'm looking for|looking for"
    r"|how|what|which|who|where|when|why|kannst du|können sie|bitte|erkläre|schreib|wie|was"
    r"|welche|peux-tu|pouvez-vous|explique|écris|comment|quel|quelle|puedes|explica|escribe"
    r"|cómo|qué|cuál|посоветуй|помоги|расскажи|объясни|напиши|как|что|какой|какие)\b"
)
# The topic is judged once the session has this many earlier messages (and enough keywords):
# the first messages of a conversation add detail rather than settle a subject.
MIN_RECENT_MESSAGES = 2
# Past this many keywords a message is not penalised for its extra detail words.
OVERLAP_CAP = 5


_TOKEN = re.compile(r"\w+(?:['’]\w+)*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA_ONLY = re.compile(r"^[\u3040-\u309f]+$")
# "16gb", "512mi", "x-t30": the unit or name part of a number-and-letters token.
_NUMBER_UNIT = re.compile(r"^\d+(?:[.,]\d+)?([^\W\d_]{2,})$")
# Share of a full hit for a new word of a topic field the session has been talking about.
FIELD_CREDIT = 1.0
# A field counts as the session's once this many distinct recent keywords belong to it.
FIELD_SUPPORT = 2
# German-style compounds are checked for a recent stem inside them from this length on.
COMPOUND_MIN = 9


@dataclass(frozen=True, slots=True, kw_only=True)
class Params:
    threshold: float = 0.2
    min_keywords: int = 5
    # Informativeness (everyday words count half) a message needs before its topic is judged.
    min_message_weight: float = 4.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    frustration: bool
    topic_shift: bool
    keywords: tuple[str, ...]
    overlap: float | None  # None when the shift was not judged (too few keywords)

    @property
    def suggestion(self) -> Suggestion | None:
        if self.frustration:
            return "compact"
        return "clear" if self.topic_shift else None


def is_frustrated(text: str) -> bool:
    """Does the message complain about the conversation itself (not ask for a task)?"""
    return complains(strip_quoted(text))


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


def stems(words: Iterable[str]) -> set[str]:
    return {stem(w) for w in words}


@dataclass(frozen=True, slots=True)
class Profile:
    """The session's topic: stems of its recent keywords and the topic fields they fill."""

    stems: frozenset[str]
    fields: frozenset[int]

    @classmethod
    def of(cls, recent: Iterable[Iterable[str]]) -> Profile:
        found: set[str] = set()
        field_keys: set[str] = set()
        for message_words in recent:
            for word in message_words:
                found.add(stem(word))
                field_keys.add(field_key(word))
        support: dict[int, int] = {}
        for key in field_keys:
            for number in fields(key):
                support[number] = support.get(number, 0) + 1
        filled = frozenset(n for n, count in support.items() if count >= FIELD_SUPPORT)
        return cls(frozenset(found), filled)


def overlap(message: Sequence[str], recent: set[str] | frozenset[str] | Profile) -> float:
    """How much of the message's keywords belongs to the session's topic, 0.0 to 1.0.

    Each keyword counts by its informativeness (everyday words half). A keyword the session
    used counts fully; a new word of a topic field the session fills counts `FIELD_CREDIT`.
    The denominator is capped at `OVERLAP_CAP`: one shared keyword in a long, detailed
    message is as much a link to the topic as in a short one.
    """
    profile = recent if isinstance(recent, Profile) else Profile(frozenset(recent), frozenset())
    if not message:
        return 1.0
    hits = total = 0.0
    for word in message:
        key = stem(word)
        share = weight(key)
        total += share
        if key in profile.stems:
            hits += share
        elif fields(field_key(word)) & profile.fields or _in_compound(word, profile.stems):
            hits += share * FIELD_CREDIT
    return min(1.0, hits / min(total, OVERLAP_CAP))


def _in_compound(word: str, recent_stems: frozenset[str]) -> bool:
    """Does a long compound ("luftentfeuchter") contain a recent stem ("feuch")?"""
    if len(word) < COMPOUND_MIN:
        return False
    return any(len(key) == 5 and key in word for key in recent_stems)


def substance(message: Sequence[str]) -> float:
    """How much a message says about a topic: its keywords weighted by informativeness."""
    return sum(weight(stem(w)) for w in message)


def analyze(text: str, recent: Sequence[Sequence[str]], params: Params = Params()) -> Analysis:
    """Judge `text` against the keywords of the session's recent user messages (oldest first)."""
    own = strip_quoted(text)
    words = keywords(own)
    frustration = complains(own)
    profile = Profile.of(recent)
    cue = _SHIFT_CUE.search(own) is not None
    enough = bool(words) if cue else substance(words) >= params.min_message_weight
    settled = len(recent) >= MIN_RECENT_MESSAGES and len(profile.stems) >= params.min_keywords
    if not settled or not enough:
        return Analysis(frustration=frustration, topic_shift=False, keywords=words, overlap=None)
    share = overlap(words, profile)
    if cue:
        shift = share < max(0.5, params.threshold)
    else:
        # Quoting someone's words ("my boss wrote '…'") brings in the user's own situation.
        quotes = own != text
        shift = (
            share < params.threshold
            and _ASKS.search(own) is not None
            and not quotes
            and not _points_back(own)
        )
    return Analysis(frustration=frustration, topic_shift=shift, keywords=words, overlap=share)


def _points_back(text: str) -> bool:
    return bool(
        _CONTINUATION_START.search(text)
        or _POLAR_QUESTION.search(text)
        or _BACK_REFERENCE.search(text)
    )


def advance(recent: Sequence[Sequence[str]], words: Sequence[str], window: int) -> list[list[str]]:
    """The recent-keywords window after a message: the last `window` messages' keywords.

    A topic shift does not empty the window: the old topic fades out within `window`
    messages, and the new topic's messages meet their own keywords meanwhile.
    """
    kept = [list(m) for m in recent[-(window - 1) :]] if window > 1 else []
    if words:
        kept.append(list(words))
    return kept


def judge_conversation(
    messages: Sequence[str], params: Params = Params(), window: int = 4
) -> Analysis:
    """Judge the last message, replaying the earlier ones as the session's history."""
    if not messages:
        raise ValueError("a conversation needs at least one message")
    recent: list[list[str]] = []
    for text in messages[:-1]:
        recent = advance(recent, keywords(text), window)
    return analyze(messages[-1], recent, params)
