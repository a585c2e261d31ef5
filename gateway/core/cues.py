"""Change-of-subject cues: does a message say it is about something else now?

"anyway, …", "btw …", "unrelated: …", "übrigens …", "ok, shelving that. random thing: …" — a
cue at the start of any sentence, after at most a few filler words ("ok so, anyway…", "haha
btw…"), in the languages Iris's users write. The suggestions finder and the knowledge
provider read the messages before such a message as another subject: they do not count
towards what it is about. Standard library only.
"""

from __future__ import annotations

import re

# A message that opens with one of these says it changes the subject: the earlier messages do
# not count towards what it is about (lowercase, matched at the start, punctuation ignored).
# The analyzer has its own cue pattern (`has_cue` in gateway/analyzer/structure.py), scored
# with its rules and models; the two lists are kept in step by hand.
_MOVING_ON_TEXT = """
    anyway|anyhow|btw|by the way|unrelated|totally unrelated|different topic|different question
    |different thing|other thing|another thing|another question|changing subject|changing the
    subject|change of subject|on another note|on a different note|off topic|random question
    |random q|random thing|quick tangent|tangent|side question|new topic|new subject|different
    subject|change of topic|switching topics|switching gears|on an unrelated note|autre chose
    |rien à voir|au fait
    |sans rapport|changement de sujet|übrigens|ganz andere frage|anderes thema|was anderes
    |themawechsel|cambiando de tema|otra cosa|por cierto|otro tema|a proposito|a propósito
    |cambiando argomento|altra cosa|domanda a parte|mudando de assunto|outra coisa|outro assunto
    |aliás|trouwens|iets anders|ander onderwerp|zmieniając temat|inna sprawa|przy okazji
    |ところで|話は変わりますが|話は変わる|それはそうと
    """
_MOVING_ON = tuple(
    sorted({" ".join(c.split()) for c in _MOVING_ON_TEXT.split("|")}, key=len, reverse=True)
)
_OPENING = re.compile(r"[\W_]+", re.UNICODE)
_SENTENCES = re.compile(r"(?<=[.!?;:。！？])\s+|\n+")
# Words a cue may follow: "ok so, new topic: …", "haha anyway", "oh and btw".
_FILLERS_TEXT = """
    ok okay oke k oh ah so well hmm hm haha lol alright right and also but yeah yes no
    thanks thx cool great nice bon alors ja na gut pues bueno vale allora então tá nou oké dobra
    """
_FILLERS = frozenset(_FILLERS_TEXT.split())
_FILLERS_BEFORE_CUE = 3


def changes_subject(text: str) -> bool:
    """Does a sentence of the message (its first 400 characters) open with a cue?"""
    return any(_opens_with_cue(sentence) for sentence in _SENTENCES.split(text[:400]))


def _opens_with_cue(sentence: str) -> bool:
    tokens = _OPENING.sub(" ", sentence[:80].lower()).split()
    for skipped in range(_FILLERS_BEFORE_CUE + 1):  # "ok so, anyway…", "haha btw…"
        if skipped and (skipped > len(tokens) or tokens[skipped - 1] not in _FILLERS):
            break
        opening = " ".join(tokens[skipped:])
        if any(
            opening.startswith(cue)
            and (opening[len(cue) : len(cue) + 1] in ("", " ") or not cue[-1].isascii())
            for cue in _MOVING_ON  # (Japanese cues run on without a space)
        ):
            return True
    return False
