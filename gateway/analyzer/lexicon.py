"""Word knowledge for the lexical rules of the context analyzer: stopwords, stems, weights.

All built once at import:

- `stem`: a light, language-neutral match key (diacritics folded, a common inflectional ending
  of English, German or a Romance language removed, then a five-letter prefix), so "tyres"
  meets "tyre", "séances" meets "seance", "migration" meets "migrate".
- `weight`: how informative a keyword is. Everyday words ("people", "sense", "city") that turn
  up in any conversation count half, so sharing one of them says little about the topic.

There are no lists of topic fields any more: they only knew subjects already seen and linked
unrelated ones through a shared stem. Meaning is the embeddings' job (`semantic.py`).
"""

from __future__ import annotations

from functools import lru_cache

_STOPWORD_TEXT = """
    a about above after again against all also am an and any anyone anything are aren't around
    as at be because been before being below between both but by can can't cannot could couldn't
    did didn't do does doesn't doing don't done down during each either else even ever every few
    for from further get gets getting got had hadn't has hasn't have haven't having he he's her
    here hers herself him himself his how how's however i i'd i'll i'm i've if in into is isn't
    it it's its itself just let let's like lot lots me might more most much must my myself need
    needs no nor not now of off oh ok okay on once one only or other our ours ourselves out over
    own please pls really right same say see seem she should shouldn't so some something still
    such sure than thank thanks that that's the their theirs them themselves then there there's
    these they they're thing things think this those though through thx to too under until up us
    use used using very via want wanted wants was wasn't way we we're we've well were weren't
    what what's when where which while who whom why will with won't would wouldn't yeah yes yet
    you you'd you'll you're you've your yours yourself also actually any anyway best better bit
    give go going good great help hi hello hey idea kind know look make makes making many maybe
    new next question quick show tell try two way without work works best does thanks cool nice
    again already always another back can could each first last long may never new old same
    ask asked explain mean meant sorry time today tomorrow yesterday
    aber alle als also am an auch auf aus bei bin bis bitte da das dass dein dem den der des die
    dir doch du ein eine einem einen einer es für gibt hab habe hat ich ihr im in ist ja jetzt
    kann kannst kein man mein mich mir mit nach nicht noch nur oder schon sein sich sie sind so
    und uns von was wie wir wo zu zum zur über
    comment combien quand pourquoi quel quelle quels quelles où cómo cuándo cuánto cuánta cuál
    dónde porqué warum wann welche welcher welches wieso weshalb wieviel как почему сколько
    au aux avec ce ces cette comme dans de des du elle en est et eux il je la le les leur lui ma
    mais me mes moi mon ne nous on ou par pas pour qu que qui sa se ses son sur ta te tes toi ton
    tu un une vos votre vous ça faire peux peut merci être avoir faut fait aussi très bien plus
    tout tous toute toutes rien quelque
    al algo como con cual de del el ella ellos en es esa ese eso esta este esto hay la las le lo
    los me mi mis muy no nos o para pero por que qué se si sin su sus también te tu un una uno y
    ya yo puedo puedes gracias
    ao as com da das de do dos e em na nas no nos o os para por que se um uma você
    il lo la gli le un uno una di da in con su per tra fra che chi cosa come dove quando perché
    mi ti ci vi si ho hai ha abbiamo sono sei è del della dei delle al alla ai nel nella ma anche
    più molto posso puoi grazie ciao questo questa quello quella
    и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее
    мне было вот от меня еще нет о из ему теперь когда даже ну ли если уже или ни быть был него
    до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней для
    мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот того
    потому этого какой совсем ним здесь этом один почти мой тем чтобы нее сейчас были куда зачем
    """
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# Inflectional endings, longest first; one is removed if at least three letters remain.
_SUFFIX_TEXT = (
    "ings ing ies ied ed es s ungen ung en er ern ciones cion zioni zione coes cao mente ment"
)
_SUFFIXES = tuple(sorted([*_SUFFIX_TEXT.split(), "e", "a", "o", "i"], key=len, reverse=True))
_FOLD = str.maketrans(
    {
        accented: plain
        for plain, group in (
            ("a", "àáâãäåā"),
            ("c", "çćč"),
            ("e", "èéêëē"),
            ("i", "ìíîïī"),
            ("n", "ñń"),
            ("o", "òóôõöøō"),
            ("u", "ùúûüū"),
            ("y", "ýÿ"),
            ("s", "š"),
            ("z", "ž"),
        )
        for accented in group
    }
)


# Chats reuse their words, so the few thousand most recent ones stay cached.
@lru_cache(maxsize=8192)
def _base(word: str) -> str:
    word = word.translate(_FOLD)
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def stem(word: str) -> str:
    """A crude, language-neutral match key: diacritics folded, one ending off, 5-char prefix."""
    return _base(word)[:5]


# Everyday content words: present in conversations about anything, so they carry little about
# the topic. English plus the most frequent ones of the other covered languages.
_COMMON_TEXT = """
    people person man woman men women guy someone everyone thing stuff part place case point
    number problem issue fact hand home end side area level group system way line lot type kind
    sort form order example reason result idea question answer information info detail details
    year years month months week weeks day days hour hours minute minutes night morning evening
    afternoon weekend moment while life world country city town street streets family friend
    friends job money water food house room car book name word words story
    big small large little huge tiny high low long short old young early late fast slow quick
    easy hard simple difficult different same similar important possible real true false full
    free open close able available whole main common usual normal general specific certain
    clear fine bad worse worst least less enough rough sense sensible smart
    start started starting stop find found take taken took keep kept put run running come came
    turn call called feel felt leave left move moved play change changed set get set put seems
    happen happens happened mind matter mean means need needed try tried trying learn
    write wrote read reading see saw watch talk talked talking say said tell told know knew
    buy bought pay paid send sent bring brought hold held stay stayed live lived
    seconds second third half double single total average percent lots plenty couple
    zeit jahr tag tage woche monat leute mensch frage problem gut schlecht groß klein neu alt
    temps jour jours semaine mois année gens chose problème question bon mauvais grand petit
    tiempo día días semana mes año gente cosa problema pregunta bueno malo grande pequeño
    tempo giorno giorni settimana mese anno gente cosa problema domanda buono grande piccolo
    dia dias semana mês ano gente coisa problema pergunta bom grande pequeno
    """

_COMMON_STEMS = frozenset(stem(w) for w in _COMMON_TEXT.split())
COMMON_WEIGHT = 0.5


def weight(word_stem: str) -> float:
    """How much a keyword (given by its stem) says about the topic: 1.0, or less if everyday."""
    return COMMON_WEIGHT if word_stem in _COMMON_STEMS else 1.0
