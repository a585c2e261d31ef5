import pytest

from gateway.analyzer.detect import (
    Mode,
    Params,
    advance,
    analyze,
    is_frustrated,
    judge_conversation,
    read,
)
from gateway.analyzer.keywords import keywords, overlap, recent_stems
from gateway.analyzer.lexicon import stem, weight
from gateway.analyzer.quoting import strip_quoted

SOURDOUGH = [
    ["sourdough", "bread", "weekend"],
    ["starter", "five", "days", "doubles", "hours"],
]


@pytest.mark.parametrize(
    "text",
    [
        "forget that",
        "ugh, forget it. let's start over.",
        "No, I said Python 3.11, not 3.8",
        "That's not what I asked.",
        "that’s not what I asked for",  # curly apostrophe
        "You're not listening to me",
        "you are confused, they're in pots",
        "Can we just reset the conversation? This got messy.",
        "Please clear your memory of that",
        "What are you talking about?",
        "How many times do I have to say it",
        "I already told you the budget",
        "We're going in circles here.",
        "you keep recommending gaming laptops",
        "Vergiss das, fangen wir von vorne an.",
        "Oublie ça, recommençons.",
        "Olvida eso, empecemos de nuevo.",
        "Ты меня не понимаешь",
        "違う、そういう意味じゃないです",
        "Stop. You're confusing Mongoose with Sequelize again.",
        "I feel like you're not paying attention at all",
        "This is ridiculous, I gave you the rate twice.",
        "You misunderstood everything, forget it.",
        "No, ti ho detto che conosco già il presente!",
        "Non mi stai ascoltando",
        "Lascia perdere, ricominciamo da capo.",
        "Você não está ouvindo",
        "Não foi isso que eu perguntei",
        "Esquece isso.",
        "Ya te dije que no tengo coche",
        "Je t'ai déjà dit que c'est pour lundi",
        "Das habe ich dir doch schon gesagt",
        # The design document's own examples.
        "let us start over",
        "reset everything",
        "forget that, let me try again",
        "you're confused",
        # Corrections and "you did not take in what I wrote", in several shapes and languages.
        "No. I said the flat has two rooms, not three.",
        "Please read what I wrote about the deadline.",
        "ugh, you ignored the limit I gave you",
        "No no, you misunderstood.",
        "You got the dates wrong again",
        "That's the third time you suggested the same library.",
        "That's still not it, the header is still missing.",
        "Why are you suggesting Redis again? I said no extra services.",
        "Let's just start over, I explained it badly.",
        "Nein, ich habe doch gesagt, dass es zwei Zimmer sind.",
        "Non, j'ai dit mardi, pas jeudi.",
        "No, te he dicho que es para mañana.",
        "Nee, ik zei toch dinsdag. Lees even goed.",
        "Tu n'as pas compris, c'est pour un enfant.",
        "Você não está entendendo, é para amanhã",
        "Ты опять не понял, я про другое",
        "Vergeet het maar, je begrijpt er niets van.",
        # A count of repetitions, mixing things up, restarting: in several languages.
        "Stop. You've explained the seam allowance three times.",
        "Das hast du jetzt zum dritten Mal wiederholt.",
        "Trzeci raz ta sama odpowiedź.",
        "Nie czytasz tego, co piszę.",
        "Zacznijmy od nowa, proszę.",
        "Lass uns bitte neu anfangen.",
        "Mais tu mélanges tout !",
        "On recommence depuis le début.",
        "Du verstehst mich einfach nicht.",
        "I think you've mixed up two different models.",
        "Could we clear this and start fresh?",
        "I'm getting really tired of this.",
    ],
)
def test_frustration_phrases_are_found(text: str) -> None:
    assert is_frustrated(text)


@pytest.mark.parametrize(
    "text",
    [
        "start over the migration from step 2",
        "Should I start over with a lower weekly distance?",
        "reset the password for the deploy user",
        "Clear the chat_history sheet first, then build the pivot",
        "How do I make git forget that file?",
        "Don't forget that the speech should mention our parents",
        'Translate "you are wrong" into German',
        "My boss said “that's not what I asked for”. How do I answer?",
        "Write a polite reply to a customer who says you're not listening",
        "If you're confused by my naming, fetch() is the coroutine",
        "You're right, that's what I asked",
        "> you're wrong\nis this quote from the book?",
        "the test checks `you are wrong` in the output",
        "If you're confusing the two types, the docs have a table",
        "The quiz app shows your wrong answers at the end",
        "Come ti ho detto, il corso inizia lunedì. Che libro mi consigli?",
        "Como já te disse, o carro é de 2019: vale a pena trocar o óleo?",
        "How do I tell a customer that I already told them the price?",
        "",
        # The same words about the work.
        "start over the migration from the last checkpoint",
        "Should I reset everything in the router config or only the DNS part?",
        "Forget that fabric, I'll use the plain navy instead.",
        "Have you tested it three times?",
        "Ich fahre zum dritten Mal nach Rom.",
        # Quoted in every style, or reported without quotes.
        "My colleague wrote 'you are wrong about the index', is he right?",
        "The reviewer wrote ‘you are wrong about the index’. Is he right?",
        "Der Kunde schrieb „Sie hören mir nicht zu“ – wie antworte ich?",
        "Le client a écrit « tu ne m'écoutes pas », que répondre ?",
        "The note said ‚forget it‘, what did it mean?",
        "The label reads 「you are confused」, is that a translation error?",
        "```\nassert msg == 'you are wrong'\n```\nwhy does this fail?",
        "My colleague told me that you are wrong about the index.",
        "The seller keeps saying forget that chart.",
        "Tom said you're confused about the dates.",
        "Mein Chef meinte, vergiss das alles.",
        # A straight-quoted complaint with an apostrophe inside, and a possessive speaker.
        "He told the nurse 'you're wrong, I can walk', which worries me. Is that safe?",
        "She wrote ‘you’re not listening’ in the review. How do I reply?",
        "The client's email said you have completely misunderstood the brief. What now?",
        "Mein Nachbar hat mir erzählt, ich solle das alles vergessen. Stimmt das?",
        # The same shapes about the work, or conditional.
        "If you misunderstood the spec, the tests will show it",
        "The script should read the file again after each change",
        "Why do you think the cache fails again after a restart?",
    ],
)
def test_task_and_quoted_look_alikes_are_not_frustration(text: str) -> None:
    assert not is_frustrated(text)


def test_reported_speech_is_blanked_but_the_users_own_words_stay() -> None:
    assert strip_quoted("He said forget it. You are wrong.").strip().endswith("You are wrong.")
    assert is_frustrated("He said it works. You're not listening.")
    assert is_frustrated("You said the opposite yesterday, you are wrong.")
    assert strip_quoted("I don't think it's right") == "I don't think it's right"


def test_keywords_drop_stopwords_and_duplicates_and_casefold() -> None:
    assert keywords("How do I speed up the Postgres query? The POSTGRES query is slow") == (
        "speed",
        "postgres",
        "query",
        "slow",
    )


def test_keywords_are_unicode_aware() -> None:
    assert keywords("Wie finde ich eine bezahlbare Wohnung in München?") == (
        "finde",
        "bezahlbare",
        "wohnung",
        "münchen",
    )
    assert keywords("Дампы базы занимают 50 гигабайт") == ("дампы", "базы", "занимают", "гигабайт")
    assert keywords("Straße STRASSE") == ("strasse",)  # casefold, not lower


def test_cjk_runs_become_bigrams_without_kana_only_pairs() -> None:
    words = keywords("京都で観光")
    assert "京都" in words
    assert "観光" in words
    assert all(len(w) == 2 for w in words)
    assert keywords("ありがとう") == ()


def test_numbers_and_single_letters_are_not_keywords() -> None:
    assert keywords("a 12 b 2024 x") == ()


def test_keywords_cut_possessives_elisions_and_keep_units() -> None:
    assert keywords("my sister's wedding speech") == ("sister", "wedding", "speech")
    assert keywords("l'entretien d'embauche") == ("entretien", "embauche")
    assert keywords("16gb and 3.5kg, 2024") == ("gb", "kg")


def test_overlap_compares_light_stems() -> None:
    recent = recent_stems([["migration", "tests", "deploy"]])
    assert overlap(["migrate", "testing"], recent) == 1.0
    assert overlap(["banana"], recent) == 0.0
    assert overlap([], recent) == 1.0


def test_overlap_denominator_is_capped() -> None:
    recent = recent_stems([["postgres"]])
    long_message = ["postgres", "a1", "b2", "c3", "d4", "e5", "f6", "g7", "h8", "i9"]
    assert overlap(long_message, recent) == pytest.approx(0.2)


def test_everyday_words_count_half() -> None:
    assert weight(stem("people")) == pytest.approx(0.5)
    assert weight(stem("shutter")) == 1.0
    assert overlap(["city", "banana"], recent_stems([["city"]])) == pytest.approx(0.5 / 1.5)


def test_compound_containing_a_recent_stem_links() -> None:
    cellar = recent_stems([["keller", "feucht"], ["fenster"]])
    assert overlap(["luftentfeuchter"], cellar) == 1.0
    assert overlap(["wandfarbe"], cellar) == 0.0


def test_stem_folds_accents_and_common_endings() -> None:
    assert stem("séances") == stem("seance")
    assert stem("tyres") == stem("tyre")
    assert stem("eggs") == stem("egg")
    assert stem("batteries") == stem("battery")


# --- topic shift, lexical mode (no embeddings) ---------------------------------------------

SOURDOUGH = [
    ["sourdough", "bread", "weekend"],
    ["starter", "five", "days", "doubles", "hours"],
]
SHIFT = "What documents does a freelancer need for a tax return in Spain?"
LEXICAL = Params(threshold=0.2)


def test_lexical_mode_needs_enough_recent_keywords() -> None:
    assert analyze(SHIFT, SOURDOUGH, LEXICAL).topic_shift
    thin = [["sourdough", "bread"], ["starter"]]  # three recent keywords < min_keywords 5
    result = analyze(SHIFT, thin, LEXICAL)
    assert (result.topic_shift, result.score) == (False, None)
    assert not analyze(SHIFT, [SOURDOUGH[0] + SOURDOUGH[1]], LEXICAL).topic_shift


def test_lexical_threshold_edges() -> None:
    text = "Which sourdough brand ships cheaply to Spain and Portugal?"
    result = analyze(text, SOURDOUGH, LEXICAL)
    assert result.mode is Mode.LEXICAL
    assert result.score == pytest.approx(0.2)
    assert not result.topic_shift  # "below the threshold" is strict
    assert analyze(text, SOURDOUGH, Params(threshold=0.21)).topic_shift


def test_default_lexical_mode_suggests_only_on_an_explicit_cue() -> None:
    assert not analyze(SHIFT, SOURDOUGH).topic_shift  # threshold 0: the selection rule's pick
    assert analyze("By the way, how do I renew my passport?", SOURDOUGH).topic_shift


def test_short_messages_and_back_references_are_continuations() -> None:
    for text in (
        "thanks!",
        "ok",
        "why?",
        "Is 16 GB of RAM enough or should I go for 32?",
        "And what about a cheaper Italian espresso machine for travelling?",
        "My neighbour's dog barks at every noise in the hallway",
    ):
        assert not analyze(text, SOURDOUGH, LEXICAL).topic_shift, text
        assert not analyze(text, *semantic_far()).topic_shift, text


@pytest.mark.parametrize(
    "text",
    [
        # Yes/no questions in the other covered languages: about something on the table.
        "¿Puede ser por el frío?",
        "¿Podría usar una lámpara más fuerte?",
        "Devo cambiare anche il filtro?",
        "Posso usarlo anche d'inverno?",
        "Hebben we daar een vergunning voor nodig?",
        "Moeten we de oude laag eerst verwijderen?",
        "Puis-je le laisser dehors la nuit ?",
        "Brauche ich dafür eine Genehmigung?",
        # A "he" or "she" nobody was introduced as in this message.
        "Which presents would he like for his graduation?",
        "How do I tell him that the plan changed?",
    ],
)
def test_more_ways_of_pointing_back(text: str) -> None:
    assert not analyze(text, SOURDOUGH, vector=TAXES, recent_vectors=[BREAD, BREAD]).judged


@pytest.mark.parametrize(
    "text",
    [
        "I need a present for my dad, he loves fishing. Any ideas?",
        "Also, totally separate: how do I descale a kettle?",
        "Au fait, comment renouveler un passeport ?",
        "Por cierto, ¿cómo se quita el óxido de una bici?",
        "Trouwens, hoe ontkalk ik een waterkoker?",
        "Cambiando argomento, come si pulisce un forno?",
        "Mudando de assunto, como faço pão de queijo?",
    ],
)
def test_new_requests_and_cues_in_several_languages_can_shift(text: str) -> None:
    assert analyze(text, SOURDOUGH, vector=TAXES, recent_vectors=[BREAD, BREAD]).topic_shift


def test_quoting_someone_is_not_a_topic_shift() -> None:
    text = 'My landlord wrote "the deposit stays with me", what documents does a tenant need?'
    assert not analyze(text, SOURDOUGH, LEXICAL).topic_shift
    assert analyze("What documents does a tenant need?", SOURDOUGH, LEXICAL).topic_shift


def test_frustration_wins_over_topic_shift() -> None:
    result = analyze("Forget it. " + SHIFT, SOURDOUGH, LEXICAL)
    assert (result.frustration, result.suggestion) == (True, "compact")


# --- topic shift, semantic mode (hand-made unit vectors) -----------------------------------

BREAD = (1.0, 0.0, 0.0)
TAXES = (0.0, 1.0, 0.0)


def semantic_far() -> tuple[list[list[str]], Params]:
    return SOURDOUGH, Params()


def test_semantic_mode_shifts_on_a_distant_request_whatever_its_words() -> None:
    far = analyze(SHIFT, SOURDOUGH, vector=TAXES, recent_vectors=[BREAD, BREAD])
    assert (far.mode, far.topic_shift, far.suggestion) == (Mode.SEMANTIC, True, "clear")
    alone = Params(cohesion_weight=0.0)  # the similarity alone, without the session's baseline
    near = analyze(SHIFT, SOURDOUGH, alone, vector=BREAD, recent_vectors=[BREAD, BREAD])
    assert not near.topic_shift
    assert near.score == pytest.approx(1.0)


def test_semantic_structure_still_rules() -> None:
    recent = [BREAD, BREAD]
    for text in ("ok thanks", "Is that normal?", "My neighbour's dog barks at every noise"):
        assert not analyze(text, SOURDOUGH, vector=TAXES, recent_vectors=recent).topic_shift


def test_semantic_needs_two_earlier_vectors() -> None:
    one = analyze(SHIFT, SOURDOUGH, vector=TAXES, recent_vectors=[BREAD])
    assert one.mode is Mode.LEXICAL


def test_vectors_of_another_size_are_ignored() -> None:
    result = analyze(SHIFT, SOURDOUGH, vector=TAXES, recent_vectors=[(1.0, 0.0), (1.0, 0.0)])
    assert result.mode is Mode.LEXICAL


def test_cue_raises_the_semantic_threshold() -> None:
    params = Params(semantic_threshold=0.84, cue_bonus=0.03, lexical_weight=0.0, cohesion_weight=0)
    recent = [BREAD, BREAD]
    halfway = (0.8, 0.6, 0.0)  # cosine 0.8 to BREAD: below 0.84
    text = "How do I renew my passport?"
    assert analyze(text, SOURDOUGH, params, vector=halfway, recent_vectors=recent).topic_shift
    close = (0.85, 0.527, 0.0)  # cosine 0.85: above 0.84, below 0.84 + 0.03
    assert not analyze(text, SOURDOUGH, params, vector=close, recent_vectors=recent).topic_shift
    cue = "By the way, how do I renew my passport?"
    assert analyze(cue, SOURDOUGH, params, vector=close, recent_vectors=recent).topic_shift
    closer = (0.9, 0.436, 0.0)  # a cued follow-up still close to the subject
    assert not analyze(cue, SOURDOUGH, params, vector=closer, recent_vectors=recent).topic_shift


@pytest.mark.parametrize(
    "text",
    [
        "Oh, random question: how do I sharpen a knife?",
        "Side question, nothing to do with this: how do I open a stuck jar?",
        "Autre chose, rien à voir : comment faire des crêpes ?",
        "Otra cosa que no tiene nada que ver: ¿cada cuánto cambio el aceite?",
        "Una curiosità che non c'entra niente: come si fa il tiramisù?",
        "Przy okazji, jak wyczyścić srebro?",
        "Ganz andere Frage: was ist Dinkelmehl?",
    ],
)
def test_cues_in_more_shapes_and_languages(text: str) -> None:
    assert read(text).cue, text


@pytest.mark.parametrize(
    "text",
    [
        "Should we reset the offsets, or start from earliest on the new topic?",
        "Should I keep the dentist bit or open with something else?",
        "We moved the build to a new topic branch, how do I rebase it?",
    ],
)
def test_cue_words_deep_in_a_sentence_are_not_cues(text: str) -> None:
    assert not read(text).cue, text


@pytest.mark.parametrize(
    "text",
    [
        "merci beaucoup, c'est très clair",
        "You're right, the castle is too far. Let's drop it.",
        "ok danke",
        "D'accord, merci",
        "Can we start over the migration from the last checkpoint?",
    ],
)
def test_complaint_similarity_ignores_thanks_and_work_resets(text: str) -> None:
    assert not analyze(text, SOURDOUGH, complaint=0.95).frustration, text


def test_near_threshold_on_either_side() -> None:
    params = Params(semantic_threshold=0.5, lexical_weight=0.0, cohesion_weight=0.0)
    just_below = analyze(SHIFT, SOURDOUGH, params, vector=(0.48, 0.877, 0.0),
                         recent_vectors=[BREAD, BREAD])  # fmt: skip
    just_above = analyze(SHIFT, SOURDOUGH, params, vector=(0.52, 0.854, 0.0),
                         recent_vectors=[BREAD, BREAD])  # fmt: skip
    assert (just_below.topic_shift, just_below.near(params)) == (True, True)
    assert (just_above.topic_shift, just_above.near(params)) == (False, True)
    far = analyze(SHIFT, SOURDOUGH, params, vector=TAXES, recent_vectors=[BREAD, BREAD])
    assert not far.near(params)


def test_complaint_similarity_counts_only_in_the_users_own_voice() -> None:
    text = "this whole exchange is a waste of my evening"
    assert not analyze(text, SOURDOUGH).frustration
    assert analyze(text, SOURDOUGH, complaint=0.95).frustration
    assert not analyze(text, SOURDOUGH, complaint=0.5).frustration
    quoted = f'My neighbour wrote "{text}"'
    assert not analyze(quoted, SOURDOUGH, complaint=0.95).frustration


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "   \n\t ", "👍🎉🔥", "😡😡😡", "x" * 100_000, ("word " * 20_000),
     "Привет, can you help mit meinem 京都 trip? 🙏",
     # Long runs of blank lines, spaces or punctuation: each once made a rule backtrack for
     # seconds to minutes (now linear; figures in the commit that fixed them).
     "\n" * 7999 + "x", " " * 7990 + "he said", "\n " * 4000 + "x", "\r\n" * 4000 + "x",
     ". " * 4000, "[" * 7999],
)  # fmt: skip
def test_bad_input_is_judged_without_error(text: str) -> None:
    for kwargs in ({}, {"vector": TAXES, "recent_vectors": [BREAD, BREAD]}):
        result = analyze(text, SOURDOUGH, **kwargs)  # type: ignore[arg-type]
        if not text.strip() or not keywords(text):
            assert result.suggestion is None
    assert judge_conversation(["a b c", "d e f", text]).suggestion in (None, "clear", "compact")


def test_advance_keeps_a_sliding_window() -> None:
    recent: list[list[str]] = []
    for words in (["a1"], ["b2"], [], ["c3"], ["d4"]):
        recent = advance(recent, words, 3)
    assert recent == [["b2"], ["c3"], ["d4"]]
    assert advance(recent, ["e5"], 1) == [["e5"]]


def test_judge_conversation_replays_history() -> None:
    messages = [
        "I want to bake sourdough bread this weekend",
        "My starter is five days old and doubles in about 8 hours",
        "What hydration should I use for a first loaf with bread flour?",
        SHIFT,
    ]
    assert judge_conversation(messages, LEXICAL).suggestion == "clear"
    assert judge_conversation(messages[:3], LEXICAL).suggestion is None
    vectors = [BREAD, BREAD, BREAD, TAXES]
    assert judge_conversation(messages, vectors=vectors).mode is Mode.SEMANTIC
    assert judge_conversation(messages, vectors=[*vectors[:3], None]).mode is Mode.LEXICAL
    with pytest.raises(ValueError, match="at least one"):
        judge_conversation([])
