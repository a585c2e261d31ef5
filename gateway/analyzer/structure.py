"""The structural rules of topic-shift detection: what a message does, not what it is about.

Similarity says how far a message is from the session's subject; these rules carry the
precision. A new subject is opened by asking for something (`asks`), so a plain statement
never counts as a shift; nor does a message that points back (`points_back`: "and what
about…", "is that normal?", a yes/no question about something on the table in any covered
language, a "he" or "she" the message did not introduce itself). An explicit
cue ("by the way", "unrelated question", "nothing to do with this", "übrigens", "przy okazji",
"before I forget") loosens the threshold (`has_cue`), where it opens a sentence: deeper inside
one the same words describe the subject ("… on the new topic"). A cue counts only when it
announces a request or stands alone (`cued_request`): "btw, the wall is plasterboard" adds a
detail. A message that opens by acknowledging the answer ("Alright. What next?") reacts to it
and points back. Question words count in every covered language, also without a question mark.
Every pattern is compiled once at import.
"""

from __future__ import annotations

from gateway.analyzer.frustration import rx

# The same few notions in every covered language: "by the way", "unrelated / nothing to do
# with this", "a different / random / side question" ("frage zwischendurch", "domanda a
# parte"), "change of subject".
_SHIFT_CUE = rx(
    r"\b(?:by the way|btw|unrelated|different (?:topic|question|subject)|new (?:topic|question)"
    r"|change of (?:topic|subject)|chang(?:e|ing) the (?:topic|subject)|switching (?:gears|topics)"
    r"|on (?:a|an) (?:different|other|unrelated|separate) (?:note|topic)|on another note"
    r"|something completely different|totally different|off[- ]topic|(?:random|side) question"
    r"|(?:totally|completely|entirely) separate|separate (?:question|topic)"
    r"|(?:has |have )?nothing to do with"
    r"|anderes thema|andere frage|übrigens|themenwechsel|(?:ganz )?was anderes"
    r"|(?:hat )?nichts (?:damit |mit \w+ )?zu tun"
    r"|autre (?:sujet|question|chose)|au fait|rien à voir|changement de sujet|hors sujet"
    r"|otro tema|otra pregunta|otra cosa|cambi(?:o|ando) de tema|por cierto|nada que ver"
    r"|outro assunto|outra pergunta|outra coisa|mud(?:ando|ança) de assunto|aliás|nada a ver"
    r"|altra domanda|altra cosa|cambi(?:o|ando) (?:argomento|discorso)|non c'entra"
    r"|trouwens|ander onderwerp|andere vraag|iets (?:heel )?anders|niets (?:mee )?te maken"
    r"|przy okazji|inne pytanie|inny temat|zmieniając temat|z innej beczki|nie na temat"
    r"|nic wspólnego|другой вопрос|другая тема|не по теме|кстати"
    r"|(?:kurze )?frage zwischendurch|question (?:à part|annexe)|pregunta aparte"
    r"|domanda a parte|pergunta à parte|vraag tussendoor|pytanie na marginesie"
    r"|вопрос не по теме"
    # "Before I forget" announces something new in every covered language.
    r"|before i forget|bevor ich(?:'s| es)? vergesse|avant que j'oublie"
    r"|antes de que se me olvide|prima che me ne dimentichi|antes que eu (?:me )?esqueça"
    r"|voor ik het vergeet|zanim zapomnę|пока не забыл)\b|ところで|話は変わ"
)
# A cue counts where it opens a sentence (within its first few words: "Oh, random question:",
# "Una curiosità che non c'entra niente:"); deeper in a sentence the same words describe the
# subject ("… to the new topic", "open with something else").
_CUE_LEAD_WORDS = 4
_CUE_LOOK_BACK = 80  # characters
_SENTENCE_START = rx(r"[.!?;:\n]")
# A message that opens by pointing back continues the topic ("and what about…", "that one…").
_CONTINUATION_START = rx(
    r"^\W*(?:and|also|but|so|then|what about|how about|and if|what if|which one|same|instead"
    r"|it|its|it's|that|that's|this|these|those|they|them|there|wait|follow[- ]?up|ok so"
    r"|und|aber|dann|das|es|et|mais|alors|donc|ça|ca|y|pero|entonces|eso|esto|и|а|но|тогда)\b"
)
# Words that refer back to something already said, anywhere in the message.
_BACK_REFERENCE = rx(
    # "this" before a colon points forward ("Translate this: …").
    r"\b(?:it|its|it's|this(?!\s*:)|these|those|they|them|their|there|such|same|also|too|then"
    r"|instead|else|either|both|here|again|still|other|second|third|previous|above"
    r"|earlier|former|latter|dies|diese|dieser|dieses|ça|cela|ces|eso|esto|esa|ese|это|эти"
    r"|этот|эту|там|тоже|также)\b"
    # "that" only as a demonstrative ("is that normal", "for that route"), not as a relative
    # pronoun ("a function that checks").
    r"|\b(?:is|was|does|did|do|for|with|about|of|like|on|in|at|to|after|before|if|than|and)"
    r" that\b(?! (?:is|are|was|were|has|have|can|will|would|does|do)\b)"
)
# A third person ("before he comes home") points back unless the message introduced somebody
# first with a possessive ("my dad, he loves fishing").
_THIRD_PERSON = rx(r"\b(?:he|him|she|er|ihn|ihm|hij|hem|él|ele|ela|он|она|они|его|ему|ей|их|им)\b")
_POSSESSIVE = rx(
    r"\b(?:my|our|mein|meine|meinem|meinen|unser|unsere|mon|ma|mes|notre|mi|mis|nuestro"
    r"|nuestra|meu|minha|mio|mia|mijn|onze|мой|моя|мои|мою|моего|наш|наша)\b"
)
# A yes/no question ("Is 16 GB enough?", "For dessert, should I…?") asks about something on
# the table;
# a request ("Can you recommend…") or a wh-question can open a new subject.
_POLAR_QUESTION = rx(
    r"^\W*(?:[^,.;:?!\n]{1,30},\s*)?(?:is|are|should|shall|would|does|do|did|must|will|has|have"
    r"|could (?!you)|can (?!you)"
    # German, French, Spanish, Italian, Portuguese, Dutch, Russian: a verb first, or a fixed
    # yes/no opener ("est-ce", "vale la pena"); "can you" and its kin are requests instead.
    r"|muss|müssen|soll|sollte|sollten|lohnt|ist|sind|kann (?!du)|könnte|brauche|brauchen"
    r"|reicht|darf|wäre|est-ce|faut-il|dois-je|puis-je|devrais-je|peut-on|vaut-il|est-il"
    r"|sería|debería|debo|puedo|podría|puede ser|me conviene|conviene|vale la pena|hay"
    r"|devo|dovrei|posso|potrei|potrebbe|ha senso|serve|basta|deveria|pode ser"
    r"|(?:is|zijn|moet|moeten|kan|kunnen|mag|zou|heb|hebben|heeft|wordt|klopt)"
    r" (?:ik|we|wij|het|er|dat|dit|die|deze|hij|ze|mijn|onze|de|een)"
    r"|стоит|нужно|можно|надо|может"
    # "Is there …?" in the other languages, and the Polish yes/no particle.
    r"|gibt es|y a-t-il|il y a|c'è|ci sono|há|existe|czy)\b"
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
    r"|cómo|qué|cuál|посоветуй|помоги|расскажи|объясни|напиши|как|что|какой|какие"
    # Question words and requests of the other covered languages (a chat question often
    # goes without its question mark: "wat is de hoofdstad van noorwegen").
    r"|wo|wann|warum|wieso|wer|gib mir|hilf mir|empfiehl|où|quand|pourquoi|combien|donne-moi"
    r"|aide-moi|dónde|cuándo|por qué|cuánto|cuánta|cuántos|cuántas|dame|recomiéndame"
    r"|cosa|quale|quali|dove|perché|puoi|potresti|mi consigli|come (?:si|faccio|posso)"
    r"|o que|qual|quais|onde|por que|você pode|pode me|como (?:faço|posso|se)|wat|hoe|welke"
    r"|waar|wanneer|waarom|wie|kun je|kunt u|kan je|jak|co(?=\s)|jaki|jaka|jakie|gdzie|kiedy"
    r"|dlaczego|możesz|pomóż|poleć)\b"
)


# A message that opens by acknowledging the answer ("Alright. What would you measure first?",
# "ok, e poi come mi alleno?") reacts to it: without a cue it continues the topic.
_ACK_START = rx(
    r"^\W*(?:(?:ok(?:ay)?|alright|all right|got it|thanks|thank you|great|perfect|cool|nice|fine"
    r"|understood|makes sense|merci|danke|gracias|grazie|obrigad[oa]|bedankt|dzięki|d'accord"
    r"|vale|va bene|verstanden|alles klar|entendido|capito|entendi|parfait|perfecto|perfetto"
    r"|perfeito|super|top|dobrze|спасибо|понятно|хорошо|ясно)\b\W*?)+[.!,;:]"
)
# What may stand between a cue and the request it announces: "by the way, unrelated, how …",
# "totally unrelated but can you …", "random question: is it …".
_AFTER_CUE = rx(
    r"^(?:\W|\b(?:but|mais|aber|pero|ma|mas|maar|ale|но|unrelated|question|quick|random|totally"
    r"|completely|separate|though|anyway|one more|was ganz anderes|etwas anderes)\b)*"
)


_SENTENCE_END = rx(r"[.!?？\n]")
# A request put as a wish, anywhere in the cue's sentence ("we'd like to take her away …").
_WISH = rx(
    r"\b(?:i|we)(?:'d| would)? (?:need|want|like|love)\b|\blooking for\b|\bich (?:brauche|suche"
    r"|möchte|will)\b|\bje (?:cherche|voudrais|veux)\b|\b(?:quiero|quisiera|necesito|busco)\b"
    r"|\b(?:vorrei|voglio|cerco)\b|\b(?:quero|queria|preciso)\b|\bik (?:wil|zoek|zou graag)\b"
    r"|\b(?:chcę|chciałbym|chciałabym|szukam|potrzebuję)\b"
)


def asks(text: str) -> bool:
    return _ASKS.search(text) is not None


def _cue_ends(text: str) -> list[int]:
    """Where each cue that opens a sentence ends."""
    ends = []
    for cue in _SHIFT_CUE.finditer(text):
        # Only the few words before the cue matter: a bounded look-back keeps a long message
        # full of cue words linear.
        window = max(0, cue.start() - _CUE_LOOK_BACK)
        starts = [m.end() for m in _SENTENCE_START.finditer(text, window, cue.start())]
        if not starts and window > 0:
            continue  # no sentence start near: the cue is deep inside a long sentence
        lead = text[starts[-1] if starts else 0 : cue.start()]
        if len(lead.split()) <= _CUE_LEAD_WORDS:
            ends.append(cue.end())
    return ends


def has_cue(text: str) -> bool:
    return bool(_cue_ends(text))


def cued_request(text: str) -> bool:
    """Does a cue that opens a sentence announce a request ("btw, how do I …", "random
    question, is it …", "Different topic: I need …"), or stand alone ("Change of subject.")?
    A cue that introduces a statement ("übrigens, die Fenster sind einfachverglast", "by the
    way, the duplicates only happen on partition 3. Does that tell you anything?") adds a
    detail to the current subject, whatever is asked after it."""
    for end in _cue_ends(text):
        rest = text[end:]
        filler = _AFTER_CUE.match(rest)  # (it always matches, if only the empty string)
        rest = rest[filler.end() :] if filler else rest
        stop = _SENTENCE_END.search(rest)
        sentence = rest if stop is None else rest[: stop.end()]
        if (
            len(sentence.split()) <= 1
            or asks(sentence)
            or _POLAR_QUESTION.match(sentence)
            or _WISH.search(sentence)
        ):
            return True
    return False


def points_back(text: str) -> bool:
    return bool(
        _ACK_START.search(text)
        or _CONTINUATION_START.search(text)
        or _POLAR_QUESTION.search(text)
        or _BACK_REFERENCE.search(text)
        or _names_nobody_new(text)
    )


def _names_nobody_new(text: str) -> bool:
    person = _THIRD_PERSON.search(text)
    return person is not None and _POSSESSIVE.search(text, 0, person.start()) is None


def shape(text: str, cue: bool) -> tuple[bool, ...]:
    """What the message does, rule by rule, for the learned shift model (which weighs each on
    its own instead of the all-or-nothing `candidate`): it asks; it points back, and each way
    of doing so — a yes/no question, a back reference, an opening acknowledgement, an opening
    continuation word; a cue announces a request. `text` is the user's own words."""
    ways = (
        _POLAR_QUESTION.search(text) is not None,
        _BACK_REFERENCE.search(text) is not None,
        _ACK_START.search(text) is not None,
        _CONTINUATION_START.search(text) is not None,
    )
    # `points_back`, from the ways already read
    back = any(ways) or _names_nobody_new(text)
    return (asks(text), back, *ways, cue and cued_request(text))


SHAPE_SIZE = len(shape("", False))
