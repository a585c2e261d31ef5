"""What a message says about the assistant's replies themselves, as features of the learned
frustration model (`learned.frustration_features`), not as rules.

Two shapes of complaint carry no complaint word and no "I told you": the sixteenth blind set
missed sixteen of its forty complaints, eleven of them these, while scoring them just under the
threshold (one sentence vector does not set them apart from a follow-up):

- `brief`: the user asks for a shorter answer or objects to its length ("mate this is like the
  fifth wall of text", "mucho texto. resumemelo en una frase", "za dlugo. w dwoch zdaniach",
  "mi servono due righe, non un manuale", "kannst dus bitte kuerzer machen");
- `flip`: the user points out that the assistant contradicted itself ("earlier you told me to
  open it… now… pick one", "antes me dijiste… y ahora…?? en que quedamos", "najpierw ze…,
  teraz ze… to w koncu jak?"), or asks it to make up its mind.

A request for a summary or a word of time ("first sand it, now oil it") also matches now and
then; the model weighs each part with the rest of the message. Every covered language, with
and without accents, as people type in chat. Each pattern is compiled once, and every gap is
bounded, so a match costs time linear in the message.
"""

from __future__ import annotations

from gateway.analyzer.frustration import rx

_FEW = (
    r"(?:one|two|three|a few|1|2|3|einem|einer|zwei|drei|paar|une|deux|trois|quelques|una|dos"
    r"|tres|pocas|duas|três|tres|poucas|due|tre|poche|één|een|twee|drie|paar|jednym|jednej|dwóch"
    r"|dwoch|trzech|kilku)"
)
_UNITS = (
    r"(?:lines?|sentences?|words?|bullets?|satz|sätzen|saetzen|sätze|saetze|zeilen?|worten"
    r"|lignes?|phrases?|mots|líneas?|lineas?|frases?|palabras|linhas?|palavras|righe|riga"
    r"|parole|zin|zinnen|regels?|woorden|zdaniu|zdaniach|zdania|słowach|slowach|linijkach)"
)
_BRIEF = rx(
    rf"\b(?:in|en|em|w) {_FEW} {_UNITS}\b|\b{_FEW} {_UNITS} (?:max|maximum|reichen|suffisent"
    r"|bastan|bastam|bastano|zijn genoeg|wystarcz)"
    # English
    r"|\b(?:shorter|too long|wall of text|walls of text|tl;?dr|less text|keep it short"
    r"|short version|shorter version|just the gist|an essay|a novel|brief(?:er)? please"
    r"|just (?:tell me )?yes or no)\b"
    # German
    r"|\b(?:kürzer|kuerzer|zu lang|viel zu viel text|so viel text|textwand|weniger text"
    r"|kurzfassung|ein roman|romane|fass(?: das| es)? (?:kurz )?zusammen)\b"
    # French
    r"|\b(?:plus court|trop long|un pavé|un pave|des pavés|des paves|moins de texte|en bref"
    r"|résume|resume|un roman)\b"
    # Spanish
    r"|\b(?:más corto|mas corto|muy largo|demasiado largo|mucho texto|tanto texto|un tocho"
    r"|resúm|resum|menos rollo|menos texto|al grano|un testamento)"
    # Portuguese
    r"|\b(?:mais curto|muito longo|textão|textao|menos texto|direto ao ponto|resumindo"
    r"|um testamento|uma bíblia|uma biblia)\b"
    # Italian
    r"|\b(?:più breve|piu breve|più corto|piu corto|troppo lung|un papiro|un poema|meno testo"
    r"|un manuale|riassum|sintetizza)"
    # Dutch
    r"|\b(?:korter|te lang|lap tekst|lappen tekst|minder tekst|samenvat|een boek)"
    # Polish
    r"|\b(?:krócej|krocej|za długo|za dlugo|za długie|za dlugie|mniej tekstu|elaborat"
    r"|streść|stresc|w skrócie|w skrocie|wypracowanie)"
)
# "first / earlier … you said …, now …", bounded gaps; and "which is it" in every language.
_FLIP = rx(
    r"\b(?:first|earlier|before|a minute ago|messages? ago|erst|vorhin|vorher|eben noch"
    r"|gerade noch|d'abord|avant|tout à l'heure|tout a l'heure|primero|antes|hace un rato"
    r"|primeiro|antes|agora há pouco|agora ha pouco|prima|poco fa|eerst|net nog|daarnet"
    r"|eerder|najpierw|wcześniej|wczesniej|przed chwilą|przed chwila)\b.{0,120}?"
    r"\b(?:now|jetzt|nun|maintenant|ahora|agora|ora|adesso|nu|teraz)\b"
    r"|\b(?:which is it|make up your mind|pick one|you contradict|contradicting yourself"
    r"|was denn nun|entscheid dich|widersprichst|faut savoir|décide-toi|decide-toi|decide toi"
    r"|tu te contredis|en qué quedamos|en que quedamos|decídete|decidete|te contradices"
    r"|em que ficamos|decide-te|se contradiz|deciditi|ti contraddici|mettiti d'accordo"
    r"|wat is het nou|wat nou|spreek je jezelf tegen|to w końcu|to w koncu|zdecyduj się"
    r"|zdecyduj sie|przeczysz sobie)\b"
)


def replies(text: str) -> tuple[bool, bool]:
    """`brief` and `flip` in the user's own words (quotes already blanked)."""
    return _BRIEF.search(text) is not None, _FLIP.search(text) is not None


REPLIES = len(replies(""))
