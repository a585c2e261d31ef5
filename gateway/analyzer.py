"""Pure detection of frustration and topic shifts in a user message. No I/O, no state.

Runs on every chat message before the agent turn, so it is built for speed: every regex and
word list is compiled once at import; a call builds only small per-message sets.

- Frustration: phrase patterns ("forget that", "that's not what I asked", "you're not
  listening"…) matched in clause-initial position or as fixed complaints, after quoted text and
  code are blanked out. Look-alikes that are tasks ("start over the migration from step 2",
  "reset the password", "translate 'forget it'") are excluded by the pattern shapes and by a
  reporting-frame check ("translate", "saying", "write a reply"…) in front of the match.
- Keywords: Unicode word tokens, casefolded, stopwords of several languages removed,
  deduplicated; runs of Han/Kana characters (no spaces between words) become bigrams.
- Topic shift: the share of the message's keywords found among the session's recent keywords
  (compared on a light stem, so "migrate" meets "migration") below a threshold. Judged only
  once the session has two earlier messages and enough recent keywords, and only for
  messages with enough keywords of their own (quoted text does not count). A new subject is
  opened by asking for something, so a plain statement never counts as a shift; nor does a
  message that points back ("and what about…", "is that normal?", "the second paragraph") or
  a yes/no question ("Is 16 GB enough?"). An explicit "unrelated question" or "by the way"
  tips a weak overlap into a shift. Keyword overlap cannot tell a follow-up with new
  vocabulary from a new subject: that is what the optional confirmation model is for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Suggestion = Literal["clear", "compact"]

_APOS = "['’]"


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace("'", _APOS), re.IGNORECASE)


# Quoted or code text is somebody else's words: blank it before looking for complaints.
_QUOTED = re.compile(
    r'"[^"\n]*"|“[^”\n]*”|„[^“”\n]*[“”]|«[^»\n]*»|‘[^’\n]*’(?!\w)|`[^`]*`|^\s*>.*$',
    re.MULTILINE,
)
# Start of a clause, plus interjections people put in front of a complaint.
_LEAD = (
    r"(?:^|[.!?;:\n]\s*|,\s*|\s[-—–]\s*)"
    r"(?:(?:no+|nope|ugh+|argh+|sigh|ok(?:ay)?|oh|just|please|pls|god|man|look|listen|seriously"
    r"|stop|dude|come on|hey|again|honestly|nein|non|mais|bueno|pues|nee)[,!.]*\s+)*"
)
_CLAUSE_PHRASES = (
    r"forget (?:it|that|this|all (?:of )?(?:that|this)|everything(?: (?:i|we) (?:said|discussed))?"
    r"|what i (?:said|asked|wrote))\b(?! (?:to|when|in|on|at|file|folder|key|entry))",
    r"(?:let's |can we |could we |we should |i want to |i'd like to |just )?"
    r"(?:start (?:over|again|afresh|fresh|from scratch)|begin again)"
    r"\s*(?:$|[.!?,;]|please\b|then\b)",
    r"(?:let's |can we |could we |please )?(?:just )?(?:reset|restart|wipe|clear)"
    r" (?:the|this|our|my|your) (?:conversation|chat|context|thread|discussion|memory|history)"
    r"(?=\s*(?:$|[.!?,;:]|please\b|and\b|so\b|now\b|for me\b))",
    r"i give up(?: on (?:this|it|you))?\s*(?:$|[.!?,;])|i(?:'m| am) (?:giving up|done with this)\b",
    r"забудь (?:это|всё|все|про это)|(?:давай )?начн[её]м (?:сначала|заново)",
    r"no,? i (?:said|meant|asked|wrote)\b",
    r"i (?:already|just) (?:said|told you|explained|asked)\b",
    r"as i (?:already |just )?(?:said|told you|mentioned) (?:before|already|earlier|twice)\b",
    r"wrong again\b",
    r"still (?:wrong|not (?:right|it|what i (?:asked|meant|want(?:ed)?)))\b",
    r"vergiss (?:das|es|alles)\b",
    r"(?:lass uns |wir )?(?:fang(?:en)? (?:wir )?)?(?:noch ?mal )?von vorne"
    r"(?: an(?:fangen)?)?\s*(?:$|[.!?,])",
    r"oublie (?:ça|ca|tout|cela)\b",
    r"(?:on )?recommen[cç]ons\b|reprenons (?:depuis le début|à zéro|a zero)\b",
    r"olvida (?:eso|esto|todo|lo que (?:dije|te dije))\b",
    r"(?:empecemos|empezemos|volvamos a empezar) de (?:nuevo|cero)\b",
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
    r"そういう意味じゃな|そうじゃなくて|最初からやり直|話を聞いてな",
    r"(?:that's|that is) (?:completely|totally|still|just) wrong\b",
    r"du (?:verstehst|hörst) (?:mich |mir )?(?:nicht|überhaupt nicht)\b"
    r"|das (?:habe|hab) ich nicht (?:gefragt|gesagt|gemeint)\b",
    r"tu ne (?:comprends|m'écoutes) (?:pas|rien)\b|ce n'est pas ce que j'ai (?:demandé|dit)\b",
    r"no me (?:entiendes|escuchas)\b|(?:eso )?no es lo que (?:te )?(?:pregunté|pedí|dije)\b",
)
_FRUSTRATION = _rx(
    "(?:" + _LEAD + "(?:" + "|".join(_CLAUSE_PHRASES) + "))|(?:" + "|".join(_ANYWHERE_PHRASES) + ")"
)
# A complaint inside a task ("translate …", "write a reply saying …") is not about us.
_REPORTING = _rx(
    r"\b(?:translate|translation|saying|says|quote|draft|lyrics|song|title|called|phrase"
    r"|meaning of|mean by|write (?:a|an|the|me)|reply (?:with|to)|respond (?:with|to)"
    r"|how (?:do|would|can) (?:i|you) say|in (?:german|french|spanish|english)|grammar)\b"
)
_SHIFT_CUE = _rx(
    r"\b(?:by the way|btw|unrelated|different (?:topic|question|subject)|new (?:topic|question)"
    r"|change of (?:topic|subject)|chang(?:e|ing) the (?:topic|subject)|switching (?:gears|topics)"
    r"|on (?:a|an) (?:different|other|unrelated|separate) (?:note|topic)|on another note"
    r"|something (?:else|completely different)|totally different|anderes thema|übrigens"
    r"|autre (?:sujet|question)|otro tema|otra pregunta|cambiando de tema|другой вопрос"
    r"|кстати)\b|ところで|話は変わ"
)
# A message that opens by pointing back continues the topic ("and what about…", "that one…").
_CONTINUATION_START = _rx(
    r"^\W*(?:and|also|but|so|then|what about|how about|and if|what if|which one|same|instead"
    r"|it|its|it's|that|that's|this|these|those|they|them|there|wait|follow[- ]?up|ok so"
    r"|und|aber|dann|das|es|et|mais|alors|donc|ça|ca|y|pero|entonces|eso|esto|и|а|но|тогда)\b"
)
# Words that refer back to something already said, anywhere in the message.
_BACK_REFERENCE = _rx(
    r"\b(?:it|its|it's|this|these|those|they|them|their|there|such|same|also|too|then"
    r"|instead|else|either|both|here|again|still|other|second|third|previous|above"
    r"|earlier|former|latter|dies|diese|dieser|dieses|ça|cela|ces|eso|esto|esa|ese|это|эти"
    r"|этот|эту|там|тоже|также)\b"
    # "that" only as a demonstrative ("is that normal", "for that route"), not as a relative
    # pronoun ("a function that checks").
    r"|\b(?:is|was|does|did|do|for|with|about|of|like|on|in|at|to|after|before|if|than|and)"
    r" that\b(?! (?:is|are|was|were|has|have|can|will|would|does|do)\b)"
)
# A yes/no question ("Is 16 GB enough?", "For dessert, should I…?") asks about something on
# the table;
# a request ("Can you recommend…") or a wh-question can open a new subject.
_POLAR_QUESTION = _rx(
    r"^\W*(?:[^,.;:?!\n]{1,30},\s*)?(?:is|are|should|shall|would|does|do|did|must|will|has|have"
    r"|could (?!you)|can (?!you)|muss|müssen|soll|sollte|lohnt|ist|sind|kann (?!du)|est-ce"
    r"|faut-il|dois-je|sería|debería|hay|стоит|нужно|можно|надо)\b"
)
# A new subject is opened by asking for something; a plain statement ("The soil stays wet")
# adds detail to the current one.
_ASKS = _rx(
    r"[?？]|(?:か|ください|教えて)\W*$"
    r"|^\W*(?:(?:can|could|would|will) you|please|pls|help|write|explain|suggest|recommend"
    r"|tell me|give me|show me|draft|translate|summari[sz]e|describe|list|compare|create|plan"
    r"|convert|find|calculate|i need|i want|i'd like|i would like|i'm looking for|looking for"
    r"|how|what|which|who|where|when|why|kannst du|können sie|bitte|erkläre|schreib|wie|was"
    r"|welche|peux-tu|pouvez-vous|explique|écris|comment|quel|quelle|puedes|explica|escribe"
    r"|cómo|qué|cuál|посоветуй|помоги|расскажи|объясни|напиши|как|что|какой|какие)\b"
)
# The topic is judged once the session has this many earlier messages (and enough keywords):
# the first messages of a conversation add detail rather than settle a subject.
MIN_RECENT_MESSAGES = 2
# Past this many keywords a message is not penalised for its extra detail words.
OVERLAP_CAP = 5


_TOKEN = re.compile(r"\w+(?:['’]\w+)*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA_ONLY = re.compile(r"^[\u3040-\u309f]+$")

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
    tu un une vos votre vous ça faire peux peut merci
    al algo como con cual de del el ella ellos en es esa ese eso esta este esto hay la las le lo
    los me mi mis muy no nos o para pero por que qué se si sin su sus también te tu un una uno y
    ya yo puedo puedes gracias
    ao as com da das de do dos e em na nas no nos o os para por que se um uma você
    и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее
    мне было вот от меня еще нет о из ему теперь когда даже ну ли если уже или ни быть был него
    до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней для
    мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот того
    потому этого какой совсем ним здесь этом один почти мой тем чтобы нее сейчас были куда зачем
    """
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(frozen=True, slots=True, kw_only=True)
class Params:
    threshold: float = 0.2
    min_keywords: int = 5
    min_message_keywords: int = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    frustration: bool
    topic_shift: bool
    keywords: tuple[str, ...]
    overlap: float | None  # None when the shift was not judged (too few keywords)

    @property
    def suggestion(self) -> Suggestion | None:
        if self.frustration:
            return "compact"
        return "clear" if self.topic_shift else None


def strip_quoted(text: str) -> str:
    return _QUOTED.sub(" ", text)


def is_frustrated(text: str) -> bool:
    """Does the message complain about the conversation itself (not ask for a task)?"""
    return _complains(strip_quoted(text))


def _complains(plain: str) -> bool:
    for match in _FRUSTRATION.finditer(plain):
        if not _REPORTING.search(plain, 0, match.start() + 1):
            return True
    return False


def keywords(text: str) -> tuple[str, ...]:
    """Content words of a message, casefolded, stopwords removed, first occurrence order."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text.casefold().replace("’", "'")):
        if _CJK.search(token):
            for gram in _cjk_bigrams(token):
                seen.setdefault(gram, None)
        elif len(token) > 1 and not token.isdigit() and token not in _STOPWORDS:
            seen.setdefault(token, None)
    return tuple(seen)


def _cjk_bigrams(run: str) -> Iterable[str]:
    if len(run) == 1:
        return ()
    grams = (run[i : i + 2] for i in range(len(run) - 1))
    return [g for g in grams if not _KANA_ONLY.match(g)]


_SUFFIXES = ("ing", "ed", "es", "s")


def stem(word: str) -> str:
    """A crude, language-neutral match key: common English endings off, then a 5-char prefix."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:5]


def stems(words: Iterable[str]) -> set[str]:
    return {stem(w) for w in words}


def overlap(message: Sequence[str], recent_stems: set[str]) -> float:
    """Share of the message's keywords that recent messages used too, 0.0 to 1.0.

    The denominator is capped at `OVERLAP_CAP`: one shared keyword in a long, detailed
    message is as much a link to the topic as in a short one.
    """
    if not message:
        return 1.0
    hits = sum(1 for w in message if stem(w) in recent_stems)
    return min(1.0, hits / min(len(message), OVERLAP_CAP))


def analyze(text: str, recent: Sequence[Sequence[str]], params: Params = Params()) -> Analysis:
    """Judge `text` against the keywords of the session's recent user messages (oldest first)."""
    own = strip_quoted(text)
    words = keywords(own)
    frustration = _complains(own)
    recent_stems: set[str] = set()
    for message_words in recent:
        recent_stems.update(stem(w) for w in message_words)
    cue = _SHIFT_CUE.search(own) is not None
    enough = len(words) >= (1 if cue else params.min_message_keywords)
    settled = len(recent) >= MIN_RECENT_MESSAGES and len(recent_stems) >= params.min_keywords
    if not settled or not enough:
        return Analysis(frustration=frustration, topic_shift=False, keywords=words, overlap=None)
    share = overlap(words, recent_stems)
    if cue:
        shift = share < max(0.5, params.threshold)
    else:
        shift = share < params.threshold and _ASKS.search(own) is not None and not _points_back(own)
    return Analysis(frustration=frustration, topic_shift=shift, keywords=words, overlap=share)


def _points_back(text: str) -> bool:
    return bool(
        _CONTINUATION_START.search(text)
        or _POLAR_QUESTION.search(text)
        or _BACK_REFERENCE.search(text)
    )


def advance(recent: Sequence[Sequence[str]], words: Sequence[str], window: int) -> list[list[str]]:
    """The recent-keywords window after a message: the last `window` messages' keywords.

    A topic shift does not empty the window: the old topic fades out within `window`
    messages, and the new topic's messages meet their own keywords meanwhile.
    """
    kept = [list(m) for m in recent[-(window - 1) :]] if window > 1 else []
    if words:
        kept.append(list(words))
    return kept


def judge_conversation(
    messages: Sequence[str], params: Params = Params(), window: int = 4
) -> Analysis:
    """Judge the last message, replaying the earlier ones as the session's history."""
    if not messages:
        raise ValueError("a conversation needs at least one message")
    recent: list[list[str]] = []
    for text in messages[:-1]:
        recent = advance(recent, keywords(text), window)
    return analyze(messages[-1], recent, params)
