"""Somebody else's words inside a user message: quotes, code and reported speech.

"My colleague wrote 'you are wrong about…'" is not the user complaining, and "The seller said
forget that chart" is not the user asking to start over. Before the frustration rules look
at a message, everything that is not the user's own voice is blanked out:

- quoted text in every common style: straight double quotes, straight single quotes used as
  quotes (not apostrophes; an apostrophe inside, as in 'you're wrong', does not end one),
  “ ”, ‘ ’, „ “, ‚ ‘, « », ‹ ›, 「 」, 『 』, backticks and fenced code, and `>` quote lines;
- reported speech without quote marks: after somebody other than the user and a verb of
  saying ("my boss told me", "the manual says", "er meinte", "il m'a dit", "me dijo",
  "mi ha detto", "ele disse", "он сказал", "hij zei"), the rest of that sentence;
- a speaker's label: a sentence that opens with a person or a source of messages and a colon
  or a dash ("My colleague: you are confused…", "From the ticket - You are wrong again…",
  "Mein Chef: …"), the rest of that sentence. Only such nouns make a label: "The problem:
  you keep forgetting" is the user's own voice.

`quotes_someone` says whether anything was blanked: the topic rules treat such a message as
part of the user's own situation rather than a new subject.
"""

from __future__ import annotations

import re

_QUOTED = re.compile(
    r"```.*?```|`[^`\n]*`"
    r'|"[^"\n]*"|“[^”\n]*”|„[^“”\n]*[“”]|‚[^‘’\n]*[‘’]|«[^»\n]*»|‹[^›\n]*›|「[^」\n]*」|『[^』\n]*』'
    # Single quotes: an apostrophe between two letters inside ('you're wrong') does not close
    # the quote, and a straight one opens a quote only where it cannot be an apostrophe.
    r"|‘(?:[^’\n]|(?<=\w)’(?=\w))*’(?!\w)"
    r"|(?<![\w'])'(?=\S)(?:[^'\n]|(?<=\w)'(?=\w))*(?<=\S)'(?![\w'])"
    r"|^[ \t]*>.*$",  # not `\s*`: from every blank line it would rescan all that follow
    re.MULTILINE | re.DOTALL,
)

# Somebody other than the user (never "I", "we" or "you"), then a verb of saying. The reported
# words run to the end of the sentence.
_NOT_US = r"(?!(?:i|we|you|u|ich|wir|du|ihr|je|nous|tu|vous|yo|tú|io|eu|você|ik|jij|я|мы|ты|вы)\b)"
_SPEAKER = (
    r"\b(?:my|our|his|her|their|the|a|an|this|that|one|some|mein|meine|unser|unsere|der"
    r"|die|das|ein|eine|mon|ma|notre|le|la|un|une|mi|mis|nuestro|nuestra|el|il|lo|mio|mia"
    r"|meu|minha|o|mijn|onze|de|het|een|мой|моя|наш|наша)\s+"
    # "the designer's email said": a possessive is part of the speaker.
    f"(?:{_NOT_US}[\\w'’]+\\s+){{0,2}}{_NOT_US}[\\w'’]+"
    r"|\b(?:he|she|they|someone|somebody|everyone|people|er|sie|il|elle|ils|él|ella"
    r"|ellos|lui|lei|loro|ele|ela|eles|hij|zij|ze|он|она|они)"
)
_SAYING = (
    r"\s+(?:(?:just|also|then|literally|always|still|once)\s+)?"
    r"(?:said|says|saying|(?:exact )?words (?:were|was)|told (?:me|us|him|her|them)"
    r"|tells (?:me|us)|wrote|writes|replied"
    r"|replies|answered|commented|shouted|yelled|texted|emailed|messaged|posted|claims?"
    r"|claimed|insists?|insisted|keeps? (?:saying|telling (?:me|us))|kept saying"
    r"|sagte|sagt|meinte|meint|schrieb|schreibt|rief|behauptet|erzählte|erzählt"
    r"|hat (?:mir )?(?:gesagt|geschrieben|erzählt)|a dit|m'a dit|m'a écrit|a écrit|disait"
    r"|a répondu|dijo|me dijo"
    r"|escribió|me escribió|dice|contestó|ha detto|mi ha detto|ha scritto|mi ha scritto"
    r"|disse|me disse|escreveu|falou|respondeu|zei|zegt|schreef|сказал[аи]?"
    r"|написал[аи]?|говорит|ответил[аи]?)\b"
)
_REPORTED = re.compile(f"(?:{_SPEAKER}){_SAYING}" + r"[^.!?\n]*", re.IGNORECASE)
# "Tom said …": a capitalised name that is not a pronoun of the user or the assistant.
_NAMED = re.compile(
    r"\b(?!(?:I|We|You|Ich|Wir|Du|Je|Nous|Tu|Vous|Yo|Tú|Io|Eu|Você|Ik|Jij|Я|Мы|Ты|Вы)\b)"
    r"[A-ZÀ-ÖØ-ÞА-Я]\w+" + f"(?i:{_SAYING})" + r"[^.!?\n]*"
)


# A speaker's label: a person who is not the one talking to us (never "my friend" or "buddy",
# which address the assistant), after a possessive or "the"; or a source of messages after
# "from" ("From the ticket -"). A message noun alone is not a label: "My message: you ignored
# it" and "That reply - you are wrong" are the user's own voice. A plural -s is allowed.
_PERSON = (
    r"(?:colleague|co-?worker|boss|manager|supervisor|client|customer|teammate|wife|husband"
    r"|mom|mum|dad|mother|father|teacher|reviewer|tester|landlord|neighbou?r"
    r"|kollege|kollegin|chef|chefin|kunde|kundin|vermieter|collègue|patron|patronne|cheffe"
    r"|cliente?|colega|jefe|jefa|collega|capo|chefe|baas|klant|коллега|начальник|клиент)"
)
_SOURCE = (
    r"(?:ticket|e-?mail|mail|message|chat|thread|review|comment|reply|post|letter|note"
    r"|nachricht|brief|mensaje|correo|messaggio|mensagem|bericht|письм[оа]|сообщени[ея])"
)
_POSSESSIVE = (
    r"(?:my|our|his|her|their|the|mein|meine|meinem|unser|unsere|der|die|das|mon|ma|notre"
    r"|le|la|mi|nuestro|nuestra|el|il|lo|mio|mia|meu|minha|mijn|onze|de|het|мой|моя|моё"
    r"|мое|наш|наша|наше)"
)
_LABELLED = re.compile(
    r"(?:^|(?<=[.!?\n]))[ \t]*(?:"
    + f"{_POSSESSIVE}\\s+(?:[\\w'’-]+\\s+)?{_PERSON}s?"
    + r"|(?:from|per|von|aus|de|da|van|от|из)\s+"
    + f"{_POSSESSIVE}\\s+(?:[\\w'’-]+\\s+)?(?:{_PERSON}|{_SOURCE})s?"
    + r")[ \t]*(?::|[ \t][-–—])[^.!?\n]*",
    re.IGNORECASE | re.MULTILINE,
)


# Both reported-speech patterns need a verb of saying. Most messages have none, and looking
# for the verb alone costs a fraction of trying every speaker at every word.
# Tried only where a run of whitespace starts: from inside a run the search would retry the
# rest of the run at every position (quadratic on a message of many spaces).
_SAYS = re.compile(r"(?<!\s)" + _SAYING, re.IGNORECASE)


def strip_quoted(text: str) -> str:
    """The message with quoted text, code and reported speech blanked out."""
    plain = _QUOTED.sub(" ", text)
    if ":" in plain or " -" in plain or "–" in plain or "—" in plain:
        plain = _LABELLED.sub(" ", plain)
    if _SAYS.search(plain) is None:
        return plain
    plain = _REPORTED.sub(" ", plain)
    return _NAMED.sub(" ", plain)


def quotes_someone(text: str) -> bool:
    return strip_quoted(text) != text
