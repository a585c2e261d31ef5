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
("stop inventing …"), thanks that are none, asking again ("waarom vraag je dat weer"), each in
every covered language. The same words about the work do not count: "start over" and "reset
everything" must end their clause ("start over the migration from the checkpoint" is a task).
The caller blanks quoted text, code and reported speech first (`quoting.py`), and a complaint
inside a task ("translate …", "write a reply saying …") does not count. `acknowledges` (a
message opening with thanks or agreement) and `resets_work` (reset words with an object: "start
over the migration …") keep the complaint similarity of `semantic.py` from overruling what the
words say. Every pattern is compiled once at import.
"""

from __future__ import annotations

import re

_APOS = "['’]"


def rx(pattern: str) -> re.Pattern[str]:
    """Case-insensitive pattern in which an apostrophe also matches a curly one."""
    return re.compile(pattern.replace("'", _APOS), re.IGNORECASE)


# Start of a clause, plus interjections people put in front of a complaint.
_LEAD = (
    r"(?:^|[.!?;:\n]\s*|,\s*|\s[-—–]\s*)"
    r"(?:(?:no+|nope|ugh+|argh+|sigh|ok(?:ay)?|oh|just|please|pls|god|man|look|listen|seriously"
    r"|stop|dude|come on|hey|again|honestly|nein|non|mais|bueno|pues|nee)[,!.]*\s+)*"
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
    r"vergiss (?:das|es|alles)\b",
    r"(?:lass uns |wir )?(?:fang(?:en)? (?:wir )?)?(?:noch ?mal )?von vorne"
    r"(?: an(?:fangen)?)?\s*(?:$|[.!?,])",
    r"oublie (?:ça|ca|tout|cela)\b|vergeet (?:het|dat|alles)(?: maar)?\b",
    r"(?:on )?recommen[cç]ons\b|reprenons (?:depuis le début|à zéro|a zero)\b",
    r"olvida (?:eso|esto|todo|lo que (?:dije|te dije))\b",
    r"(?:empecemos|empezemos|volvamos a empezar) de (?:nuevo|cero)\b",
    r"(?:lascia(?:mo)? perdere|laisse tomber|déjalo|olvídalo|esquece(?: isso)?|esqueça"
    r"|deixa (?:pra|para) lá|lass (?:es )?gut sein)\s*(?:$|[.!?,;])",
    r"dimentica (?:tutto|questo|quello che ho (?:detto|scritto))\b"
    r"|ricominciamo(?: da capo| da zero| daccapo)?\s*(?:$|[.!?,;])",
    r"(?:esquece|esqueça) (?:tudo|o que eu (?:disse|falei))\b"
    r"|(?:vamos )?(?:começar de novo|recomeçar(?: do zero)?)\s*(?:$|[.!?,;])",
)
# Complaints that are unambiguous wherever they appear.
_ANYWHERE_PHRASES = (
    r"(?<!\bif )(?<!when )(?<!whether )(?<!unless )(?<!case )"
    r"(?:you're|you are|ur|you've been) (?:still |clearly |obviously |totally |completely )?"
    r"(?:confused|wrong|not listening|not getting it|not understanding|not reading"
    r"|missing the point|making (?:this|that|things|stuff) up|going in circles|useless|hopeless"
    r"|ignoring (?:me|what i|my))",
    r"you (?:don't|do not|didn't|did not|aren't|are not|never) (?:understand|get it|listen"
    r"|read (?:my|what)|answer(?:ed)? (?:my|the) question|paying attention)",
    r"you keep (?:on )?\w+ing\b|contradicting yourself\b",
    r"(?:that's|that is|this is|this isn't|that isn't|it's) (?:not|nothing like) what i"
    r" (?:asked|said|meant|wanted|requested)\b",
    r"not what i (?:asked|meant) for\b|^not what i (?:asked|meant)\b",
    r"what are you (?:even )?talking about\b",
    r"(?:clear|reset|wipe) (?:this|that|everything)(?: out)? and start"
    r" (?:over|fresh|afresh|again)\b",
    # "You've explained X three times", "Das hast du zum dritten Mal wiederholt", "Trzeci raz
    # ta sama odpowiedź": a count of repetitions addressed to the assistant.
    r"(?<!have )(?<!did )you(?:'ve| have)? (?:already )?(?:\w+ed|said|told|wrote|written|gave"
    r"|given|shown|showed|sent) (?:\S+ ){0,5}(?:twice|three times|four times|several times"
    r"|multiple times|(?:for )?the (?:second|third|fourth|fifth|umpteenth|\d+(?:nd|rd|th)) time)\b",
    r"du\b[^.!?]{0,40}zum (?:zweiten|dritten|vierten|fünften|x-ten|wiederholten) mal\b"
    r"|zum (?:zweiten|dritten|vierten|fünften|x-ten|wiederholten) mal\b[^.!?]{0,40}\bdu\b"
    r"|tu\b[^.!?]{0,40}pour la (?:deuxième|troisième|quatrième|énième) fois\b"
    r"|por (?:segunda|tercera|cuarta|enésima) vez\b[^.!?]{0,40}\b(?:me|has|tú)\b"
    r"|per la (?:seconda|terza|quarta|ennesima) volta\b[^.!?]{0,40}\b(?:mi|hai|tu)\b"
    r"|pela (?:segunda|terceira|quarta|enésima) vez\b[^.!?]{0,40}\b(?:me|você)\b"
    r"|voor de (?:tweede|derde|vierde|zoveelste) keer\b[^.!?]{0,40}\b(?:je|jij)\b"
    r"|(?:drugi|trzeci|czwarty|kolejny) raz (?:\w+ ){0,2}(?:ta sama|to samo|ten sam)\b",
    r"(?:i'm|i am) (?:getting )?(?:really |so )?(?:tired|sick) of this\b"
    r"|fed up with (?:this|you)\b",
    r"tu (?:\w+ )?(?:mélanges|confonds) (?:tout|les|deux)\b|(?:lo )?(?:estás mezclando|mezclas)"
    r" (?:todo|las|los|dos)\b|(?:stai mescolando|confondi|mescoli) (?:tutto|le|i|due)\b"
    r"|(?:você )?(?:está misturando|misturou|confundiu) (?:tudo|as|os|duas|dois)\b"
    r"|du (?:bringst|wirfst) (?:\w+ ){0,2}durcheinander\b|du verwechselst\b"
    r"|je haalt (?:\w+ ){0,2}door elkaar\b|(?:pogubiłeś|pogubiłaś|pomyliłeś|pomyliłaś) się\b"
    r"|się pogubiłeś|się pogubiłaś|nie (?:czytasz|słuchasz|rozumiesz)\b",
    r"(?:clear|wipe|reset|erase) your (?:memory|context)\b",
    r"ты (?:меня )?(?:не понимаешь|не слушаешь)|я (?:же )?(?:уже )?(?:сказал|говорил)[аи]?\b",
    r"are you (?:even )?(?:listening|reading)\b|did you (?:even )?read (?:my|what)\b",
    r"how many times (?:do|must|should|have) i\b",
    r"i (?:told|asked) you (?:already|before|twice|three times|that already)\b",
    r"(?:this|that|it) is (?:going nowhere|pointless|useless|hopeless|ridiculous|so frustrating)\b"
    r"|(?:this|that)'s (?:going nowhere|pointless|useless|hopeless|ridiculous|so frustrating)\b",
    r"(?:we're|we are) going (?:around |round )?in circles\b",
    r"stop (?:repeating yourself|making (?:stuff|things) up|apologi[sz]ing and)\b",
    r"(?:this|that) (?:is not|isn't) helping\b",
    r"(?:that's|that is) (?:completely|totally|still|just) wrong\b",
    r"du (?:verstehst|hörst) (?:mich |mir )?(?:\w+ )?(?:nicht|überhaupt nicht)\b"
    r"|das (?:habe|hab) ich nicht (?:gefragt|gesagt|gemeint)\b",
    r"tu ne (?:comprends|m'écoutes) (?:pas|rien)\b|ce n'est pas ce que j'ai (?:demandé|dit)\b",
    r"no me (?:entiendes|escuchas)\b|(?:eso )?no es lo que (?:te )?(?:pregunté|pedí|dije)\b",
    r"(?<!\bif )(?<!when )(?<!whether )(?<!unless )you(?:'re| are) (?:still |again |now )?"
    r"(?:confusing \w+(?: \w+)? (?:with|and)\b"
    r"|mixing (?:up|\w+ up)\b|not paying attention|misunderstanding (?:me|everything|what)"
    r"|repeating yourself|overcomplicating (?:this|it))",
    r"(?<!\bif )(?<!when )you(?:'ve| have)? (?:completely |totally |just |again )?"
    r"(?:misunderstood|misread|ignored|confused everything"
    r"|mixed (?:everything |it all |things )?up)\b"
    r"|you (?:completely |totally )?misunderstand (?:me|everything|my|what|the question)\b",
    # "You got the measurements wrong again", "that's the third time you …".
    r"(?<!\bif )(?<!when )you(?:'ve| have)? got (?:\S+ ){1,3}wrong\b"
    r"|(?:that's|that is|this is|it's) the (?:second|third|fourth|fifth|umpteenth|\d+(?:nd|rd|th))"
    r" time (?:that )?you\b"
    r"|(?:that's|that is|it's|it is) still (?:wrong|not (?:it|right"
    r"|what i (?:asked|meant|wanted)))\b"
    r"|why (?:are|do) you (?:still |keep )?\w+ing\b[^.?!]{0,60}\bagain\b",
    r"you (?:still )?(?:haven't|have not) (?:answered|read|understood) (?:my|the|what)\b",
    r"i(?:'ve| have)? (?:gave|given|told|sent|showed|shown) you (?:\w+ ){0,4}"
    r"(?:twice|three times|already|before)\b",
    r"i(?:'ve| have)? (?:said|mentioned|written|explained) (?:\w+ ){0,4}(?:twice|three times)\b",
    r"read (?:my|the) (?:last |previous )?(?:message|question|messages) again\b",
    r"(?<!come )(?:te l'ho|ti ho) (?:già )?(?:detto|scritto|spiegato)\b"
    r"|non mi (?:ascolti|capisci|stai ascoltando)\b|non (?:hai capito|capisci) (?:niente|nulla)\b"
    r"|non è (?:quello|ciò) che ho (?:chiesto|detto)\b|sei (?:confuso|confusa)\b"
    r"|(?:ancora|di nuovo) sbagliato\b|non stai ascoltando\b",
    r"(?<!como )(?:eu )?já (?:te )?(?:disse|falei|expliquei)\b"
    r"|você não (?:está )?(?:entende|entendeu|entendendo|me ouve|ouvindo|escutando|lendo)\b"
    r"|não (?:foi|é) isso que (?:eu )?(?:pedi|perguntei|disse)\b|você está confus[oa]\b"
    r"|(?:errado de novo|de novo errado)\b",
    r"(?<!como )ya te (?:lo )?(?:dije|he dicho|expliqué)\b|no (?:has entendido|entiendes) nada\b"
    r"|estás confundid[oa]\b|no me estás escuchando\b|otra vez mal\b",
    r"(?<!comme )je (?:te )?l'ai déjà dit\b|(?<!comme )je t'ai déjà dit\b"
    r"|tu n'as (?:rien|pas) compris\b|tu répètes (?:encore )?la même chose\b"
    r"|on tourne en rond\b|tu te trompes encore\b",
    r"(?:habe|hab) ich (?:dir )?(?:doch )?(?:schon|bereits) (?:gesagt|geschrieben|erklärt)\b"
    r"|du hörst (?:mir )?nicht zu\b|schon wieder falsch\b|wir drehen uns im kreis\b",
    r"ты (?:опять |снова |же |вообще )?не (?:слушаешь|понял|поняла|понимаешь)|опять не то\b"
    r"|я же (?:писал|писала)\b",
    r"je (?:begrijpt|snapt) (?:er |het )?(?:niets|niks|niet)\b|je luistert niet\b"
    r"|dat is niet wat ik (?:vroeg|bedoelde|zei)\b",
    # Repeating itself, in every covered language.
    r"(?:you(?:'re| are) )?repeating yourself\b|you repeat yourself\b|tu te répètes\b"
    r"|du wiederholst dich\b|te (?:estás )?repites\b|ti (?:stai )?ripet(?:i|endo)\b"
    r"|você (?:está )?se repet(?:e|indo)\b|je herhaalt (?:jezelf|je)\b|ты повторяешься"
    r"|powtarzasz się\b"
    r"|(?:that's|that is|it's|this is) (?:literally |just )?the same (?:answer|reply|list|thing)"
    r" (?:as before|again)\b",
    # Not reading what the user wrote: "are you even reading", "liest du überhaupt".
    r"(?:is (?:this|it) (?:thing )?|are you |do you |did you )(?:even |actually )read(?:ing)?\b"
    r"|please (?:actually |just )?read (?:what|my)\b"
    r"|liest du (?:überhaupt|eigentlich|auch)\b|(?:kannst|könntest) du (?:bitte )?(?:mal |auch )?"
    r"lesen,? was ich\b|tu (?:lis|as lu) (?:au moins|vraiment|même)\b"
    r"|(?:siquiera|acaso|de verdad) lees\b|(?:ma |almeno )leggi (?:quello|cosa|i miei)\b"
    r"|você (?:sequer |pelo menos |ao menos )?(?:lê|leu) o que\b"
    r"|lees je (?:wel|eigenlijk|überhaupt)\b|ты (?:вообще |хоть )читаешь|czytasz (?:w ogóle|ty)\b",
    # The user's own words already given: a count, or where ("at the start", "in my third
    # message"), in every covered language.
    r"i(?:'ve| have)? (?:already )?(?:said|told you|wrote|written|mentioned|explained)"
    r" (?:\S+ ){0,5}"
    r"(?:(?:two|three|four|five|several|many|\d+) times|at the (?:very )?(?:start|beginning)"
    r"|in my (?:first|second|third|fourth|last|previous|\w+th) message)\b"
    r"|(?:habe|hab) ich (?:dir )?(?:jetzt |doch |schon |bereits )*(?:zweimal|dreimal|viermal"
    r"|mehrmals|x-mal|\d+ ?mal) (?:gesagt|erklärt|geschrieben)\b"
    r"|ça fait (?:deux|trois|quatre|\d+) fois que tu\b"
    r"|je (?:te )?l'ai (?:déjà )?(?:dit|écrit) (?:deux|trois|plusieurs|\d+) fois\b"
    r"|(?:te )?lo (?:he dicho|dije) (?:dos|tres|varias|mil|\d+) veces\b"
    r"|te l'ho (?:già )?(?:detto|scritto) (?:due|tre|mille|\d+) volte\b"
    r"|já (?:te )?(?:disse|falei|escrevi) (?:isso )?(?:duas|três|várias|mil|\d+) vezes\b"
    r"|(?:dat )?zei ik (?:toch |je )?al\b|ik heb (?:het|dat) (?:al )?(?:twee|drie|vaak|\d+)"
    r" keer gezegd\b|я (?:уже )?(?:два|три|сто|\d+) раза? (?:сказал|писал|говорил)"
    r"|(?:trzeci|drugi|kolejny) raz (?:piszesz|mówisz|podajesz)\b"
    r"|(?:mówiłem|pisałem) (?:ci )?już\b",
    # Making things up.
    r"(?:stop|quit) (?:inventing|making (?:things|stuff) up|hallucinating)\b"
    r"|you(?:'ve| have)? (?:just )?(?:invented|made up|hallucinated)\b"
    r"|made[- ]up \w+(?: \w+)? you(?:'ve| have)? (?:given|shown|sent|suggested)\b"
    r"|hör auf,? (?:\w+ )?zu erfinden\b|du erfindest\b|arrête d'inventer\b|tu inventes\b"
    r"|deja de inventar\b|te (?:lo )?(?:estás )?invent(?:as|ando)\b|smettila di inventare\b"
    r"|(?:para|pare) de inventar\b|você (?:está )?invent(?:a|ando|ou)\b|je verzint\b"
    r"|хватит выдумывать|ты выдумываешь|przestań wymyślać\b|wymyślasz\b",
    # Thanks that are none.
    r"thanks for nothing\b|danke für nichts\b|merci pour rien\b|gracias por nada\b"
    r"|grazie per niente\b|obrigad[oa] por nada\b|bedankt voor niks\b|dzięki za nic\b",
    # Asking again what the user already said; telling the same again.
    r"why (?:are you|do you keep) asking (?:me )?(?:that|this|again)\b|stop asking\b"
    r"|warum fragst du (?:das |mich )?(?:schon )?wieder\b"
    r"|erzählst du mir (?:schon |jetzt )?wieder\b"
    r"|pourquoi tu (?:me )?(?:re)?demandes? (?:ça|encore)\b"
    r"|por qué me (?:lo )?vuelves a preguntar\b|perché me lo (?:richiedi|chiedi di nuovo)\b"
    r"|por que você (?:me )?pergunta isso de novo\b|waarom vraag je (?:dat|dit) (?:nou |nu )?"
    r"(?:weer|opnieuw)\b|почему ты (?:опять|снова) спрашиваешь|dlaczego (?:znowu|znów) pytasz\b"
    r"|(?<!\bif )(?<!when )you(?:'re| are) (?:still )?\w+ing\b[^.?!]{0,60}\bagain\b",
)
# Japanese has no spaces, so its phrases cannot wait for a word boundary.
_JAPANESE = r"そういう意味じゃな|そうじゃなくて|最初からやり直|話を聞いてな"
# The word boundary in front of the fixed complaints lets the engine skip positions inside
# words: the per-message cost is dominated by this one search.
_FRUSTRATION = rx(
    f"(?:{_LEAD}(?:{'|'.join(_CLAUSE_PHRASES)}))"
    f"|\\b(?:{'|'.join(_ANYWHERE_PHRASES)})|(?:{_JAPANESE})"
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
    r"\b(?:start(?:ing)? over|start again|reset|restart|clear|wipe|redo|forget)\s+"
    r"(?:the|my|our|this|that|these|those|a|an|all the|every)\s+"
    r"(?!(?:conversation|chat|context|thread|discussion|whole conversation|whole chat)\b)\w"
)


def resets_work(plain: str) -> bool:
    return _RESETS_WORK.search(plain) is not None


def acknowledges(plain: str) -> bool:
    return _ACKNOWLEDGES.search(plain) is not None


def complains(plain: str) -> bool:
    """Does `plain` (quotes already stripped) complain about the conversation?"""
    for match in _FRUSTRATION.finditer(plain):
        if not _REPORTING.search(plain, 0, match.start() + 1):
            return True
    return False
