"""The fixed complaints of the frustration rules (`frustration.py`): phrasings about the
conversation that are a complaint wherever they appear in a message, in English, German,
French, Spanish, Italian, Portuguese, Dutch, Polish and Russian — the assistant confused,
wrong, not listening or reading, repeating or contradicting itself, going in circles, making
things up, answering something else; the user's words already given ("I said that at the
start", "te lo dije desde el principio"), a counted repetition ("c'est la 3e fois que tu"),
dropping the whole conversation, thanks that are none. Patterns as text, joined and compiled
once by `frustration.py` (where an apostrophe also matches a curly one, case ignored).
"""

from __future__ import annotations

# "At the start" of something else ("at the start of the course", "au début de l'année") is
# not the start of the conversation.
NOT_OF = r"(?!\s+(?:of|de|du|d'|del|della|di|do|da|des|der|vom|van)\b)"
# Complaints that are unambiguous wherever they appear.
ANYWHERE_PHRASES = (
    r"(?<!\bif )(?<!when )(?<!whether )(?<!unless )(?<!case )"
    r"(?:you're|you are|ur|you've been) (?:still |clearly |obviously |totally |completely )?"
    r"(?:confused|wrong|not listening|not getting it|not understanding|not reading"
    r"|missing the point|making (?:this|that|things|stuff) up|going in circles|useless|hopeless"
    r"|ignoring (?:me|what i|my))",
    r"you (?:don't|do not|didn't|did not|aren't|are not|never) (?:understand|get it|listen"
    r"|read (?:my|what)|answer(?:ed)? (?:my|the) question|paying attention)",
    r"you keep (?:on )?\w+ing\b|contradicting yourself\b",
    # Contradicting itself, in every covered language.
    r"you(?:'ve| have)? (?:just |now )?contradict(?:ed)? yourself\b|du widersprichst dir\b"
    r"|tu te contredis\b|(?:te )?(?:estás contradiciendo|contradices)\b"
    r"|(?:ti )?(?:stai contraddicendo|contraddici)\b|(?:você|vc|tu) (?:está |tá )?(?:se )?"
    r"contradi(?:z|zendo|sse)\b|je spreekt (?:jezelf|je) tegen\b|przeczysz (?:sam )?sobie\b"
    r"|ты (?:сам )?себе противоречишь|противоречишь (?:сам )?себе",
    # Going in circles, in every covered language.
    r"(?:this|it|we|you)(?:'re|'s| is| are)? (?:just )?going (?:a?round )?in circles\b"
    r"|going round and round\b|tu tournes en rond\b|(?:estás|estamos) dando vueltas\b"
    r"|(?:vas|vamos) en círculos?\b|(?:você|vc|tu|a gente) (?:está |tá |ta )?(?:andando|girando"
    r"|rodando) em círculos?\b|(?:stai girando|giriamo|giri) in tondo\b"
    r"|du drehst dich im kreis\b|(?:je draait|we draaien) (?:in )?(?:rondjes|kringetjes)\b"
    r"|(?:kręcisz|kręcimy) się w kółko\b|ходим по кругу",
    # The user's words already given at the start or in a named message, in every covered
    # language ("I said it at the very start", "ich hab doch ganz am Anfang geschrieben").
    r"(?:i|i've|i have) (?:\S+ ){0,2}(?:said|told you|wrote|written|mentioned|explained|asked)"
    r" (?:\S+ ){0,6}?(?:(?:at|from) the (?:very )?(?:start|beginning|outset)|in my (?:very )?"
    r"(?:first|original|opening|previous|last) message)\b"
    + NOT_OF
    + r"|(?:it|that|this|the \w+)(?:'s| is| was) (?:right |literally |all |already )?"
    r"(?:in|at the top of) my (?:very )?(?:first|original|opening|previous|last|earlier) message\b"
    r"|(?:hab|habe) (?:ich )?(?:dir )?(?:doch |schon |bereits )*(?:ganz |gleich )?(?:am anfang"
    r"|zu beginn|anfangs|in meiner ersten nachricht) (?:\S+ ){0,2}(?:gesagt|geschrieben|erwähnt)\b"
    r"|(?:je t'ai|je te l'ai|je l'ai|j'ai) (?:\S+ ){0,2}(?:dit|écrit|précisé|mentionné)"
    r" (?:\S+ ){0,2}?(?:dès le début|au début|dans mon premier message)\b"
    + NOT_OF
    + r"|(?:te )?(?:lo )?(?:dije|he dicho|escribí|expliqué) (?:\S+ ){0,2}?(?:desde el (?:principio"
    r"|inicio|comienzo)|al principio|en mi primer mensaje)\b"
    + NOT_OF
    + r"|(?:te l'ho|l'ho|ho) (?:\S+ ){0,2}(?:detto|scritto) (?:\S+ ){0,2}?(?:(?:fin )?dall'inizio"
    r"|all'inizio|nel (?:mio )?primo messaggio)\b"
    + NOT_OF
    + r"|(?:eu )?(?:falei|disse|escrevi|expliquei) (?:\S+ ){0,2}?(?:logo )?(?:no (?:começo|início)"
    r"|desde o (?:começo|início)|na (?:minha )?primeira mensagem)\b"
    + NOT_OF
    + r"|(?:ik )?(?:zei|schreef|heb (?:het|dat) (?:al )?(?:gezegd|geschreven)) (?:\S+ ){0,2}?"
    r"(?:in het begin|aan het begin|meteen al|in mijn eerste bericht)\b"
    + NOT_OF
    + r"|(?:pisałem|pisałam|mówiłem|mówiłam) (?:\S+ ){0,2}?(?:na (?:samym )?początku|od początku"
    r"|w pierwszej wiadomości)\b|я (?:же )?(?:сразу|в самом начале) (?:сказал|написал)",
    # The same thing again, counted ("that's the 3rd time you …", "c'est la 3e fois que tu").
    r"(?:second|third|fourth|fifth|umpteenth|\d+(?:nd|rd|th)) time (?:that )?you(?:'ve| have)?\b"
    r"|la (?:deuxième|troisième|quatrième|énième|\d+e|\d+ème) fois que tu\b"
    r"|la (?:segunda|tercera|cuarta|enésima|\d+ª?) vez que (?:me )?\w+s\b"
    r"|la (?:seconda|terza|quarta|ennesima|\d+ª?) volta che (?:mi )?\w+i\b"
    r"|a (?:segunda|terceira|quarta|enésima|\d+ª?) vez que (?:você|vc|tu)\b"
    r"|de (?:tweede|derde|vierde|zoveelste|\d+e) keer dat je\b"
    r"|(?:już )?(?:drugi|trzeci|czwarty|kolejny|\d+\.?) raz (?:mi )?\w+sz\b",
    # "You keep …ing" and "the same answer", in the other covered languages.
    r"(?:você|vc|tu) (?:fica|continua) (?:me )?\w+ndo\b|(?:me )?sigues \w+ndo\b"
    r"|(?:me )?(?:lo )?vuelves a (?:decir|repetir|sugerir|preguntar|dar|poner|mandar|explicar)\b"
    r"|(?:me )?repites lo mismo\b|continui a \w+re\b|tu continues (?:à|a|de) \w+"
    r"|je blijft (?:maar )?(?:\S+ ){0,3}?\w+en\b"
    r"|(?:tu )?me (?:sors|redonnes|ressors) (?:\S+ ){0,2}la même réponse\b",
    # Not reading the user's words, in the other covered languages.
    r"tu (?:ne |n')?(?:lis|comprends|écoutes|m'écoutes) (?:pas|rien|jamais)\b"
    r"|du liest (?:gar |überhaupt )?nicht\b|no (?:me )?lees (?:lo que|mis)\b"
    r"|non leggi (?:quello|cosa|i miei)\b|(?:você|vc) não (?:lê|leu) (?:o que|as minhas|minhas)\b"
    r"|je leest (?:niet|mijn)\b(?! (?:boek|boeken))|ты не читаешь",
    # An answer about something else than what was asked.
    r"(?:nothing|not|has nothing) to do with (?:what i (?:asked|said|wrote)|my question)\b"
    r"|nada que ver con (?:lo que (?:te )?(?:pregunté|pedí|dije)|mi pregunta)\b"
    r"|rien à voir avec (?:ce que (?:je t'ai|j'ai) demandé|ma question)\b"
    r"|nichts mit (?:meiner frage|dem,? was ich gefragt habe) zu tun\b"
    r"|niente a che (?:fare|vedere) con (?:quello che ho chiesto|la mia domanda)\b"
    r"|nada a ver com (?:o que eu (?:perguntei|pedi)|a minha pergunta|minha pergunta)\b"
    r"|niets te maken met (?:wat ik vroeg|mijn vraag)\b"
    r"|nic wspólnego z (?:moim pytaniem|tym,? o co pytałem)\b"
    r"|(?:à|a) ce que je (?:te )?demande\b",
    # Dropping the whole conversation ("scrap this whole conversation").
    r"(?:scrap|ditch|drop|delete|nuke|bin|trash|forget) (?:this|the|our) (?:whole |entire )?"
    r"(?:conversation|chat|thread)\b|ask (?:again )?from scratch\b",
    # Praise that is none: thanks or praise with an eye-roll, an upside-down face or claps.
    r"(?:thanks|thank you|helpful|useful|great|genius|brilliant|wow|super|toll|danke|merci"
    r"|génial|genial|gracias|útil|grazie|utile|obrigad[oa]|bedankt|dzięki)\b[^.?!\n]{0,60}"
    r"(?:🙄|🙃|😒|👏)",
    r"danke für nix\b|merci pour rien\b",
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
    r"(?:(?:i'm|i am) (?:getting )?(?:really |so )?(?:tired|sick) of|fed up with) (?:you\b|this"
    r"(?= (?:conversation|chat|back and forth|nonsense)\b|\s*(?:$|[.!?,;:]|[-—–])))",
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
