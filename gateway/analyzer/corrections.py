"""What a message says about the user's own earlier words, as features of the learned
frustration model (`learned.frustration_features`), not as rules.

Complaints that restate what the assistant got wrong ("ich hab doch geschrieben KEIN keller",
"je t'ai dit 8-10 ans", "eu disse 10 MESES") or count its repetitions ("ça fait 3 fois que
…", "já é a terceira vez") take many shapes; the rules of `frustration.py` match the ones with a
fixed frame ("no, I said …", "I said that at the start"), and without the frame the same verbs
also report a conversation with somebody else ("i asked the locksmith", "ich habe gefragt, ob
…") or ask for something ("quiero que me expliques …"). So the model gets two parts on their
own and weighs them with the rest of the message:

- `said`: the user insists on what they said or wrote before — the verb with the assistant as
  its addressee ("told you", "je t'ai dit", "te dije", "ti ho detto", "ci pisałam") or with a
  word of insistence ("ich hab doch geschrieben", "ik zei toch", "i already said", "já
  disse", "as I said"), in every covered language, with and without accents, as people type
  in chat; the bare verb ("i asked", "ho detto", "pytałam") does not count;
- `counted`: a count of two or more times, or its ordinal ("three times", "zum dritten Mal",
  "3 fois", "tercera vez", "voor de vijfde keer", "po raz trzeci"), but not a frequency ("3
  times a day", "2 razy w tygodniu") or a product ("2 mal 3").

Every pattern is compiled once at import.
"""

from __future__ import annotations

from gateway.analyzer.frustration import rx

_PAST_PL = r"(?:na)?(?:pisa|mówi|mowi|powiedzia|tłumaczy|tlumaczy)(?:ł|l)(?:em|am)"
_SAID = rx(
    # English: to "you", or insisted on
    r"\bi (?:already |just |clearly |literally )?told (?:you|u|ya)\b"
    r"|\bi (?:already|clearly|literally|specifically) (?:said|wrote|mentioned|asked|specified)\b"
    r"|\bi(?:'ve| have) (?:already )?(?:said|written|mentioned) (?:this|that|it)\b"
    r"|\bas i (?:said|wrote|mentioned)\b|\bi said (?:it |that |this )?(?:already|before|earlier)\b"
    # German: "doch / schon / bereits / ja" or "dir"
    r"|\b(?:ich )?(?:hab|habe|hab's|hatte)(?: \w+){0,2}? (?:doch|schon|bereits|ja|dir)"
    r"(?: \w+){0,2}? (?:gesagt|geschrieben|erwähnt|erklärt|gefragt)\b"
    r"|\b(?:sagte|schrieb) ich (?:doch|schon|dir)\b|\bwie (?:ich )?(?:schon |bereits )?"
    r"(?:gesagt|geschrieben)\b"
    # French: "je t'ai / te l'ai / vous ai", or "j'ai bien / déjà"
    r"|\bje (?:t'|te |vous )(?:l')?(?:l'|le )?ai (?:déjà |deja |bien )?(?:dit|écrit|ecrit|précisé"
    r"|precise|expliqué|explique|demandé|demande)\b"
    r"|\bj'ai (?:bien|déjà|deja) (?:dit|écrit|ecrit|précisé|precise)\b|\bcomme (?:je l'ai|j'ai)"
    r" (?:déjà |deja )?dit\b"
    # Spanish: "te (lo) dije", "ya (te) lo dije", "como te dije"
    r"|\bte (?:lo )?(?:dije|he dicho|escribí|escribi|expliqué|explique|pregunté|pregunte)\b"
    r"|\bya (?:te )?(?:lo )?(?:dije|he dicho|expliqué|explique|escribí|escribi)\b"
    # Portuguese: "eu disse", "te disse", "já disse"
    r"|\b(?:já|ja) (?:te |lhe )?(?:disse|falei|escrevi|expliquei)\b"
    r"|\b(?:eu )?te (?:disse|falei|escrevi|expliquei)\b|\beu disse\b"
    # Italian: "ti ho detto", "te l'ho detto", "ho già detto", "come ho detto"
    r"|\b(?:ti |te l'|gliel')(?:ho|l'ho) (?:già |gia |appena )?(?:detto|scritto|spiegato"
    r"|chiesto|specificato)\b|\bl'ho (?:già |gia )?(?:detto|scritto)\b"
    r"|\bho (?:già|gia) (?:detto|scritto|spiegato)\b|\bcome (?:ti )?ho (?:già |gia )?detto\b"
    # Dutch: "ik zei toch", "heb ik al gezegd", "ik heb (het) toch geschreven"
    r"|\bik (?:heb )?(?:het |dat )?(?:toch|al|juist|net|duidelijk) (?:\w+ )?(?:gezegd"
    r"|geschreven|gevraagd)\b|\b(?:ik zei|zei ik) (?:toch|al|net|het toch|het al)\b"
    r"|\bheb ik (?:toch |al )(?:gezegd|geschreven)\b"
    # Polish: "(przecież / już) (ci) pisałam", "pisałam ci / że"
    rf"|\b(?:przecież|przeciez|już|juz) (?:ci )?{_PAST_PL}\b"
    rf"|\b{_PAST_PL} (?:ci|przecież|przeciez|już|juz|wyraźnie|wyraznie|że|ze)\b"
)
_COUNT = (
    r"(?:[2-9]|\d{2,}|two|three|four|five|second|third|fourth|fifth|zwei|drei|vier|fünf|zweite[nsm]?"
    r"|dritte[nsm]?|vierte[nsm]?|fünfte[nsm]?|deux|trois|quatre|cinq|deuxième|deuxieme"
    r"|troisième|troisieme|quatrième|quatrieme|cinquième|cinquieme|[2-9]e|dos|tres|cuatro|cinco"
    r"|segunda|tercera|cuarta|quinta|duas|três|quatro|terceira|due|quattro|cinque|seconda"
    r"|terza|twee|drie|vijf|tweede|derde|vierde|vijfde|dwa|trzy|cztery|pięć|piec)"
)
_TIMES = r"(?:times|time|mal|fois|veces|vez|vezes|volte|volta|keer|raz|razy)"
# "3 times a day", "2 razy w tygodniu", "2 mal 3": a frequency or a product, not a count.
_NOT_A_COUNT = (
    r"(?!\s*(?:\d|x\b|a |an |per |each |every |pro |par |al |a la |por |alla |na |w "
    r"|in de |op een |in |dziennie|tygodniowo|daily|weekly|täglich|am tag|die woche))"
)
_COUNTED = rx(
    rf"\b{_COUNT}(?:\.|ª|a|e|°|nd|rd|th)? {_TIMES}\b{_NOT_A_COUNT}"
    r"|\b(?:zwei|drei|vier|fünf|x)-?mal\b(?! (?:am|pro|in der|die) )"
    r"|\bpo raz (?:drugi|trzeci|czwarty|piąty|piaty|kolejny|enty)\b"
    r"|\b(?:ça|ca|cela) fait (?:\w+ )?fois\b"
)


def corrections(text: str) -> tuple[bool, bool]:
    """`said` and `counted` in the user's own words (quotes already blanked)."""
    return _SAID.search(text) is not None, _COUNTED.search(text) is not None


CORRECTIONS = len(corrections(""))
