"""What a message says about the user's own earlier words, as features of the learned
frustration model (`learned.frustration_features`), not as rules.

Complaints that restate what the assistant got wrong ("ich hab doch geschrieben KEIN keller",
"je t'ai dit 8-10 ans", "eu disse 10 MESES") or count its repetitions ("ça fait 3 fois que
…", "já é a terceira vez") take many shapes; the rules of `frustration.py` match the ones with a
fixed frame ("no, I said …", "I said that at the start"), and without the frame the same words
also report a conversation with somebody else ("i told my landlord …"). So the model gets
each part on its own and weighs it with the rest of the message:

- `said`: the user refers to what they said, wrote or asked before ("i said", "ich hab
  geschrieben", "je t'ai dit", "te dije", "eu falei", "ti ho detto", "ik zei", "pisałam"),
  with and without accents, as people type in chat;
- `counted`: a count of times ("three times", "zum dritten Mal", "3 fois", "tercera vez",
  "terza volta", "derde keer", "trzeci raz");
- `again`: "again" and its kin.

Every pattern is compiled once at import.
"""

from __future__ import annotations

from gateway.analyzer.frustration import rx

_SAID = rx(
    r"\bi (?:already |just |clearly )?(?:said|told you|wrote|mentioned|asked|specified|explained)\b"
    r"|\bich (?:hab(?:e)? )?(?:doch |dir |dich |schon |bereits |ja |extra )*"
    r"(?:gesagt|geschrieben|erwähnt|erklärt|gefragt)\b"
    r"|\bhab(?:e)? (?:ich )?(?:doch |dir |schon |bereits |ja |extra )*"
    r"(?:gesagt|geschrieben|erwähnt|erklärt|gefragt)\b|\b(?:sagte|schrieb) ich\b"
    r"|\bje (?:t'|vous )?(?:l')?ai (?:déjà |deja |bien )?(?:dit|écrit|ecrit|précisé|precise"
    r"|expliqué|explique|demandé|demande)\b|\bj'ai (?:bien |déjà |deja )?(?:dit|écrit|ecrit"
    r"|précisé|precise|demandé|demande)\b"
    r"|\b(?:te |ya te )?(?:lo )?(?:dije|he dicho|escribí|escribi|expliqué|explique|pregunté"
    r"|pregunte|puse)\b"
    r"|\b(?:eu |já |ja )(?:te |lhe )?(?:disse|falei|escrevi|expliquei|perguntei|pedi)\b"
    r"|\b(?:eu )?(?:te )?(?:disse|falei|escrevi) (?:que|q)\b"
    r"|\b(?:ti |te l'|gliel')?(?:ho|l'ho) (?:già |gia |appena )?(?:detto|scritto|spiegato|chiesto"
    r"|specificato)\b"
    r"|\bik (?:heb )?(?:toch |al |net |juist |duidelijk )*(?:zei|gezegd|schreef|geschreven"
    r"|vroeg|gevraagd)\b"
    r"|\b(?:na)?pisa(?:ł|l)(?:em|am)\b|\bmówi(?:ł|l)(?:em|am)\b|\bmowi(?:ł|l)(?:em|am)\b"
    r"|\bpowiedzia(?:ł|l)(?:em|am)\b|\bpyta(?:ł|l)(?:em|am)\b"
)
_COUNTED = rx(
    r"\b(?:twice|zweimal|dwukrotnie)\b"
    r"|\b(?:\d+|two|three|four|third|fourth|zwei|drei|vier|dritte[nsm]?|vierte[nsm]?|deux|trois"
    r"|quatre|troisième|troisieme|3e|dos|tres|cuatro|tercera|cuarta|duas|três|quatro|terceira"
    r"|quarta|due|tre|terza|twee|drie|derde|vierde|dwa|trzy|cztery|trzeci|czwarty)"
    r"(?:\.|ª|a|e|°)? (?:times|time|mal|fois|veces|vez|vezes|volte|volta|keer|raz|razy)\b"
)
_AGAIN = rx(
    r"\b(?:again|once more|nochmal|schon wieder|wieder|encore|otra vez|de nuevo|de novo"
    r"|outra vez|di nuovo|ancora|weer|opnieuw|znowu|znów|znow|ponownie)\b"
)


def corrections(text: str) -> tuple[bool, bool, bool]:
    """`said`, `counted`, `again` in the user's own words (quotes already blanked)."""
    return (
        _SAID.search(text) is not None,
        _COUNTED.search(text) is not None,
        _AGAIN.search(text) is not None,
    )


CORRECTIONS = len(corrections(""))
