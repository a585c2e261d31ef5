import pytest

from gateway.analyzer.detect import (
    Params,
    Profile,
    advance,
    analyze,
    is_frustrated,
    judge_conversation,
    keywords,
    overlap,
    stems,
    substance,
)
from gateway.analyzer.lexicon import field_key, fields, stem, weight

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
    ],
)
def test_task_and_quoted_look_alikes_are_not_frustration(text: str) -> None:
    assert not is_frustrated(text)


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


def test_overlap_compares_light_stems() -> None:
    recent = stems(["migration", "tests", "deploy"])
    assert overlap(["migrate", "testing"], recent) == 1.0
    assert overlap(["banana"], recent) == 0.0
    assert overlap([], recent) == 1.0


def test_overlap_denominator_is_capped() -> None:
    recent = stems(["postgres"])
    long_message = ["postgres", "a1", "b2", "c3", "d4", "e5", "f6", "g7", "h8", "i9"]
    assert overlap(long_message, recent) == pytest.approx(0.2)


def test_topic_shift_needs_enough_recent_keywords() -> None:
    shift = "What documents does a freelancer need for a tax return in Spain?"
    assert analyze(shift, SOURDOUGH).topic_shift
    thin = [["sourdough", "bread"], ["starter"]]  # three recent keywords < min_keywords 5
    result = analyze(shift, thin)
    assert not result.topic_shift
    assert result.overlap is None
    assert not analyze(shift, [SOURDOUGH[0] + SOURDOUGH[1]]).topic_shift  # one earlier message


def test_min_keywords_boundary() -> None:
    recent = [["alpha", "bravo"], ["charlie", "delta"]]
    shift = "What documents does a freelancer need for a tax return in Spain?"
    assert not analyze(shift, recent, Params(min_keywords=5)).topic_shift
    assert analyze(shift, recent, Params(min_keywords=4)).topic_shift


def test_threshold_edges() -> None:
    text = "Which sourdough brand ships cheaply to Spain and Portugal?"
    result = analyze(text, SOURDOUGH)
    assert result.overlap == pytest.approx(0.2)  # one shared keyword of five
    assert not result.topic_shift  # "below the threshold" is strict
    assert analyze(text, SOURDOUGH, Params(threshold=0.21)).topic_shift
    assert not analyze(text, SOURDOUGH, Params(threshold=0.0)).topic_shift


def test_short_messages_and_back_references_are_continuations() -> None:
    assert not analyze("thanks!", SOURDOUGH).topic_shift
    assert not analyze("ok", SOURDOUGH).topic_shift
    assert not analyze("Is 16 GB of RAM enough or should I go for 32?", SOURDOUGH).topic_shift
    assert not analyze(
        "And what about a cheaper Italian espresso machine for travelling?", SOURDOUGH
    ).topic_shift
    assert not analyze(
        "My neighbour's dog barks at every noise in the hallway", SOURDOUGH
    ).topic_shift


def test_explicit_cue_tips_a_short_message_into_a_shift() -> None:
    assert analyze("By the way, how do I renew my passport?", SOURDOUGH).topic_shift


def test_frustration_wins_over_topic_shift() -> None:
    result = analyze(
        "Forget it. What documents does a freelancer need for taxes in Spain?", SOURDOUGH
    )
    assert result.frustration
    assert result.suggestion == "compact"


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
        "What documents does a freelancer need for a tax return in Spain?",
    ]
    assert judge_conversation(messages).suggestion == "clear"
    assert judge_conversation(messages[:3]).suggestion is None
    with pytest.raises(ValueError, match="at least one"):
        judge_conversation([])


def test_stem_folds_accents_and_common_endings() -> None:
    assert stem("séances") == stem("seance")
    assert stem("tyres") == stem("tyre")
    assert stem("eggs") == stem("egg")
    assert stem("batteries") == stem("battery")


def test_field_keys_keep_look_alike_prefixes_apart() -> None:
    assert stem("interest") == stem("interview")  # the match key is coarse on purpose
    assert not fields(field_key("interest")) & fields(field_key("interview"))


def test_keywords_cut_possessives_elisions_and_keep_units() -> None:
    assert keywords("my sister's wedding speech") == ("sister", "wedding", "speech")
    assert keywords("l'entretien d'embauche") == ("entretien", "embauche")
    assert keywords("16gb and 3.5kg, 2024") == ("gb", "kg")


def test_everyday_words_count_half() -> None:
    assert weight(stem("people")) == pytest.approx(0.5)
    assert weight(stem("shutter")) == 1.0
    assert overlap(["city", "banana"], stems(["city"])) == pytest.approx(0.5 / 1.5)
    assert substance(["people", "city", "shutter"]) == pytest.approx(2.0)


def test_field_words_link_only_once_the_session_fills_the_field() -> None:
    cycling = Profile.of([["bike", "commute"], ["route", "climb"]])
    assert overlap(["tyre"], cycling) == 1.0
    one_word = Profile.of([["bike", "weekend"], ["holidays"]])
    assert overlap(["tyre"], one_word) == 0.0


def test_compound_containing_a_recent_stem_links() -> None:
    cellar = Profile.of([["keller", "feucht"], ["fenster"]])
    assert overlap(["luftentfeuchter"], cellar) == 1.0
    assert overlap(["wandfarbe"], cellar) == 0.0


def test_new_field_word_keeps_a_follow_up_on_topic() -> None:
    messages = [
        "I'm commuting 15 km to work by bike from next month",
        "The route has a long climb at the end",
        "I own an old steel road bike with 8 speeds",
        "What tyre width makes sense for rough city streets?",
    ]
    assert judge_conversation(messages).suggestion is None
    messages[-1] = "What's a good podcast about the history of the Roman empire?"
    assert judge_conversation(messages).suggestion == "clear"


def test_message_must_be_substantive_to_be_judged() -> None:
    assert analyze("How long to boil eggs?", SOURDOUGH_LONG).overlap is None  # 2 keywords
    judged = analyze("How long should I boil eggs for soft yolks?", SOURDOUGH_LONG)
    assert judged.overlap is not None


def test_quoting_someone_is_not_a_topic_shift() -> None:
    text = 'My landlord wrote "the deposit stays with me", what documents does a tenant need?'
    assert not analyze(text, SOURDOUGH_LONG).topic_shift
    assert analyze(text.replace('"', ""), SOURDOUGH_LONG).topic_shift


SOURDOUGH_LONG = [
    ["sourdough", "bread", "weekend"],
    ["starter", "five", "days", "doubles", "hours"],
    ["hydration", "loaf", "flour"],
]
