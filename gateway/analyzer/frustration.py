"""Frustration patterns of the context analyzer: complaints about the conversation itself.

Phrases like "forget that", "let us start over", "reset everything", "you're confused",
"that's not what I asked", "ti ho già detto", "você não está me ouvindo", matched in
clause-initial position or as fixed complaints in English, German, French, Spanish, Italian,
Portuguese, Dutch, Russian and Japanese. Besides fixed phrases, a few shapes: a correction
("no, I said …", "nein, ich habe doch gesagt …"), the user's words not taken in ("read what
I wrote", "lies genau", "you ignored …", "you misunderstood"), a repeated mistake ("you got
… wrong again", "that's the third time you …", "why are you …ing … again", a count of
repetitions in every covered language: "you've explained it three times", "zum dritten Mal"),
mixing things up ("tu mélanges tout", "du bringst alles durcheinander"), repeating itself ("tu
te répètes"), not reading ("liest du überhaupt …"), the user's words already given with a count
or a place ("I said that at the start", "ça fait trois fois que tu …"), making things up
("stop inventing …"), thanks that are none, asking again ("waarom vraag je dat weer"),
contradicting itself ("du widersprichst dir"), going in circles ("tu tournes en rond"), the
user's words given at the start ("te lo dije desde el principio", "it's in my first message"),
a counted repetition ("c'est la 3e fois que tu …"), an answer about something else ("nada que
ver con lo que pregunté"), dropping the whole conversation, praise with an eye-roll, each in
every covered language (the languages above plus Polish). The same words about the work do not
count: "start over" and "reset everything" must end their clause ("start over the migration
from the checkpoint" is a task); "fed up with this" only when "this" ends the clause.
The caller blanks quoted text, code and reported speech first (`quoting.py`), and a complaint
inside a task ("translate …", "write a reply saying …") does not count. `acknowledges` (a
message opening with thanks or agreement), `resets_work` (reset words with an object, in every
covered language: "start over the migration …", "resetear la tensión") and `follows_up` (a
follow-up question: "ok. und wie merk ich mir das?") keep the complaint similarity of
`semantic.py` from overruling what the words say. Every pattern is compiled once at import.
"""

from __future__ import annotations

import re

from gateway.analyzer.complaints import ANYWHERE_PHRASES

_APOS = "['’]"


def rx(pattern: str) -> re.Pattern[str]:
    """Case-insensitive pattern in which an apostrophe also matches a curly one."""
    return re.compile(pattern.replace("'", _APOS), re.IGNORECASE)


# Start of a clause, plus interjections people put in front of a complaint.
# Linear in a message of blank lines or repeated punctuation (one such message once cost
# minutes of the event loop): a clause starts after the last of a run of delimiters (each
# earlier one looks ahead only to the next), and whitespace is taken possessively (`*+`,
# `++`: what follows starts with a letter, so giving some back never helps a match).
_LEAD = (
    r"(?:^|[.!?;:\n](?![^\S\n]*[.!?;:\n])\s*+|,\s*+|\s[-—–]\s*+)"
    r"(?:(?:no+|nope|ugh+|argh+|sigh|ok(?:ay)?|oh|just|please|pls|god|man|look|listen|seriously"
    r"|stop|dude|come on|hey|again|honestly|nein|non|mais|bueno|pues|nee|well|so|bon|bah|ben|ach"
    r"|na|tja|mano|cara|vale|dai|allora|nou|dobra|ну)[,!.]*\s++)*"
)
_CLAUSE_PHRASES = (
    # "forget it / that / this" must end its clause ("forget that fabric" is about the work).
    r"forget (?:(?:it|that|this)(?=\s*(?:$|[.!?,;:]|[-—–]|(?:and|please|then|now|for now|i|we"
    r"|let's|let us|just|ok|part|one|idea|bit)\b))"
    r"|all (?:of )?(?:that|this)|everything(?: (?:i|we) (?:said|discussed))?"
    r"|what i (?:said|asked|wrote))\b(?! (?:to|when|in|on|at))",
    r"(?:(?:let's|let us|can we|could we|we should|i want to|i'd like to) )?(?:please )?(?:just )?"
    r"(?:start (?:over|again|afresh|fresh|from scratch)|begin again)"
    r"\s*(?:$|[.!?,;]|please\b|then\b)",
    r"(?:let's |can we |could we |please )?(?:just )?(?:reset|restart|wipe|clear)"
    r" (?:the|this|our|my|your) (?:conversation|chat|context|thread|discussion|memory|history)"
    r"(?=\s*(?:$|[.!?,;:]|please\b|and\b|so\b|now\b|for me\b))",
    r"(?:let's |let us |please )?(?:just )?(?:reset|restart|wipe|clear) (?:everything|it all"
    r"|all of (?:this|it))(?=\s*(?:$|[.!?,;:]|please\b|and\b|so\b|now\b))",
    r"(?:lass uns|wir sollten|können wir|fangen wir) (?:\w+ ){0,2}(?:neu|von vorne) (?:anfangen|an"
    r"|beginnen|starten)\b|on recommence(?: (?:depuis le début|à zéro|tout))?\s*(?:$|[.!?,;])"
    r"|zacznijmy (?:od nowa|od początku|jeszcze raz)\b",
    r"i give up(?: on (?:this|it|you))?\s*(?:$|[.!?,;])|i(?:'m| am) (?:giving up|done with this)\b",
    r"забудь (?:это|всё|все|про это)|(?:давай )?начн[её]м (?:сначала|заново)",
    # "No, I said …": a correction of what the assistant made of the user's words.
    r"(?:no+|nein|non|nee|não|nao|нет)[,.!]*\s+(?:i (?:said|meant|asked|wrote|told you)"
    r"|ich (?:habe |hab )?(?:doch |dir |schon )*(?:gesagt|geschrieben|sagte|meinte)"
    r"|j'ai (?:dit|écrit|demandé)|(?:te )?(?:he dicho|dije|escribí)|я (?:же )?(?:написал|сказал"
    r"|говорил)|ik (?:zei|schreef|vroeg|bedoelde)|eu (?:disse|falei|escrevi)"
    r"|(?:te l')?(?:ti )?ho (?:detto|scritto))\b",
    # "Read what I wrote", "please read again": the user's words were not taken in.
    r"(?:re-?read|read) (?:what i (?:wrote|said)|my (?:last |previous )?(?:message|question)"
    r"|(?:it )?again)\b|lies (?:bitte |doch )?(?:genau|nochmal|noch einmal)\b"
    r"|lees (?:even |nog eens )?(?:goed|opnieuw)\b|l[ée]e(?:lo)? (?:bien|otra vez|de nuevo)\b"
    r"|relis(?: bien| mon message)?\b|rileggi\b|leia (?:de novo|com atenção)\b"
    r"|перечитай\b",
    r"i (?:already|just) (?:said|told you|explained|asked)\b",
    r"as i (?:already |just )?(?:said|told you|mentioned) (?:before|already|earlier|twice)\b",
    r"wrong again\b",
    r"still (?:wrong|not (?:right|it|what i (?:asked|meant|want(?:ed)?)))\b",
    r"vergiss (?:einfach |bitte |doch |mal )*(?:das|es|alles)\b",
    r"(?:lass uns |wir )?(?:fang(?:en)? (?:wir )?)?(?:noch ?mal )?von vorne"
    r"(?: an(?:fangen)?)?\s*(?:$|[.!?,])",
    r"oublie (?:ça|ca|tout|cela)\b|vergeet (?:het|dat|alles)(?: maar)?\b",
    r"(?:on )?recommen[cç]ons\b|reprenons (?:depuis le début|à zéro|a zero)\b",
    r"olvida (?:eso|esto|todo|lo que (?:dije|te dije))\b",
    r"(?:empecemos|empezemos|empezamos|volvamos a empezar) de (?:nuevo|cero)\b",
    r"(?:lascia(?:mo)? perdere|laisse tomber|déjalo|olvídalo|esquece(?: isso)?|esqueça"
    r"|deixa (?:pra|para) lá|lass (?:es )?gut sein)\s*(?:$|[.!?,;])",
    r"dimentica (?:tutto|questo|quello che ho (?:detto|scritto))\b"
    r"|ricominciamo(?: da capo| da zero| daccapo)?\s*(?:$|[.!?,;])",
    r"(?:esquece|esqueça) (?:tudo|o que eu (?:disse|falei))\b"
    r"|(?:vamos )?(?:começar (?:de novo|do zero)|recomeçar(?: do zero)?)\s*(?:$|[.!?,;])",
)
# Japanese has no spaces, so its phrases cannot wait for a word boundary.
_JAPANESE = r"そういう意味じゃな|そうじゃなくて|最初からやり直|話を聞いてな"
# The word boundary in front of the fixed complaints lets the engine skip positions inside
# words: the per-message cost is dominated by this one search.
_FRUSTRATION = rx(
    f"(?:{_LEAD}(?:{'|'.join(_CLAUSE_PHRASES)}))"
    f"|\\b(?:{'|'.join(ANYWHERE_PHRASES)})|(?:{_JAPANESE})"
)
# A complaint inside a task ("translate …", "write a reply saying …") is not about us.
_REPORTING = rx(
    r"\b(?:translate|translation|saying|says|quote|draft|lyrics|song|title|called|phrase"
    r"|meaning of|mean by|write (?:a|an|the|me)|reply (?:with|to)|respond (?:with|to)"
    r"|how (?:do|would|can) (?:i|you) say|in (?:german|french|spanish|english)|grammar)\b"
)


# A message that opens by thanking, agreeing or acknowledging ("merci, c'est très clair",
# "You're right, let's drop it", "ok, verstanden") is not a complaint by its similarity to one;
# a complaint rule still counts.
_ACKNOWLEDGES = rx(
    r"^\W*(?:(?:ok(?:ay)?|alright|yes|yep|sure|oui|d'accord|ja|sí|si|sim|vale|va bene|prima"
    r"|dobrze|хорошо)\W+)*"
    r"(?:thanks|thank you|thx|cheers|you're right|good point|fair enough|makes sense|perfect"
    r"|great|got it|understood|sounds good|merci|d'accord|compris|parfait|tu as raison"
    r"|vous avez raison|danke|vielen dank|verstanden|alles klar|du hast recht|gracias|entendido"
    r"|tienes razón|perfecto|grazie|capito|hai ragione|perfetto|obrigad[oa]|valeu|entendi"
    r"|você tem razão|perfeito|bedankt|dank je|dankjewel|begrepen|je hebt gelijk|dziękuję"
    r"|dzięki|rozumiem|masz rację|спасибо|понятно|ты прав|ok(?:ay)?\W*$)\b(?! for nothing)"
)
# The reset words said about a piece of the work ("start over the migration from the last
# checkpoint", "reset the consumer offsets"): the rules do not take them as a complaint, and
# neither does the similarity, which cannot tell the object apart.
_RESETS_WORK = rx(
    r"\b(?:(?:start(?:ing)? over|start again|reset|restart|clear|wipe|redo|forget)\s+"
    r"(?:the|my|our|this|that|these|those|a|an|all the|every)\s+"
    r"(?!(?:conversation|chat|context|thread|discussion|whole conversation|whole chat)\b)\w"
    # The same in the other covered languages: a reset verb, then a piece of the work ("resetear
    # la tensión", "recommencer la liste", "ricomincio da capo con le schede"), or, in German
    # and Dutch, the piece first ("das Formular zurücksetzen").
    r"|(?:resetear|reiniciar|empezar de nuevo|volver a empezar|borrar|rehacer)\s+(?:con\s+)?"
    r"(?:el|la|los|las|mi|mis|todo el|toda la|todos los|todas las)\s+"
    r"(?!(?:conversación|chat|conversa)\b)\w|empezar de nuevo a \w+r\b"
    r"|(?:recommencer|recommence|reprendre|réinitialiser|refaire|effacer)\s+"
    r"(?:tout |toute |toutes |tous )?(?:le|la|les|l'|mon|ma|mes)\s*"
    r"(?!(?:conversation|discussion|chat)\b)\w"
    r"|(?:ricominci\w*|resettare|azzerare|rifare|cancellare)\s+(?:da capo\s+|daccapo\s+)?"
    r"(?:con\s+)?(?:il|lo|la|i|gli|le|l'|mio|mia|miei|mie|tutto il|tutta la)\s*"
    r"(?!(?:conversazione|chat)\b)\w"
    r"|(?:recomeçar|resetar|reiniciar|zerar|refazer|começar de novo)\s+(?:com\s+)?"
    r"(?:o|a|os|as|meu|minha|meus|minhas|todo o|toda a)\s+(?!(?:conversa|chat)\b)\w"
    r"|(?:den|die|das|dem|meine?n?|unsere?n?)\s+\w+\s+(?:zurücksetzen|neu starten|löschen"
    r"|neu anfangen|von vorne anfangen)\b|(?:de|het|mijn)\s+\w+\s+(?:resetten|wissen"
    r"|opnieuw (?:beginnen|doen))\b|opnieuw beginnen met\b"
    r"|(?:zacząć|zaczynać|zaczynam|zacznę) od nowa (?:od|z)\s+\w|zresetować\s+\w"
    r"|начать \w+ заново|сбросить \w+"
    r")"
)
# A follow-up question that builds on the answer ("hm. and if that doesn't help?", "ok. und wie
# merk ich mir das?", "et si je …?"): it opens, after at most a short interjection, with "and",
# "so" or "what if" in a covered language. Not a complaint by its similarity to one.
_FOLLOWS_UP = rx(
    r"^\W*(?:(?:hm+|ok(?:ay)?|ah+|oh|alright|right|gut|bon|vale|ja|yes|mhm|d'accord|va bene"
    r"|dobra|ну)\W+)?(?:and|und|et|y|e|en|so|also|donc|alors|dann|entonces|então|quindi|dus"
    r"|więc|what if|how about|und wenn|et si|y si|e se|en als|и|а если)\b[^.!]*\?\s*$"
)


def resets_work(plain: str) -> bool:
    return _RESETS_WORK.search(plain) is not None


def follows_up(plain: str) -> bool:
    return _FOLLOWS_UP.search(plain) is not None


def acknowledges(plain: str) -> bool:
    return _ACKNOWLEDGES.search(plain) is not None


def complains(plain: str) -> bool:
    """Does `plain` (quotes already stripped) complain about the conversation?"""
    for match in _FRUSTRATION.finditer(plain):
        if not _REPORTING.search(plain, 0, match.start() + 1):
            return True
    return False
