"""Complaint shapes in several languages, the complaint prototypes' calibration, and the
session's own similarity baseline for topic shifts."""

import pytest

from gateway.analyzer.detect import Params, analyze, is_frustrated, read
from gateway.analyzer.quoting import strip_quoted
from gateway.analyzer.semantic import Prototypes, cohesion
from gateway.analyzer.structure import has_cue


@pytest.mark.parametrize(
    "text",
    [
        # repeating itself
        "You're repeating yourself.",
        "Tu te répètes, franchement.",
        "Du wiederholst dich.",
        "te repites, ya lo sé",
        "ti ripeti sempre",
        "je herhaalt jezelf",
        "ты повторяешься",
        "powtarzasz się",
        "that's literally the same answer as before",
        # not reading
        "are you even reading my messages?",
        "Liest du überhaupt, was ich schreibe?",
        "czytasz w ogóle co piszę?",
        "ты вообще читаешь?",
        # the user's words already given
        "I have said it four times now.",
        "I mentioned that at the very beginning.",
        "I wrote it in my second message.",
        "Das hab ich dir jetzt dreimal erklärt.",
        "Ça fait trois fois que tu me donnes ça.",
        "te lo he dicho tres veces",
        "nee dat zei ik toch al",
        # making things up, thanks that are none, asking again
        "Please stop inventing functions.",
        "you just made up that setting",
        "That's the second made-up option you've given me.",
        "Can we please just start fresh?",
        "arrête d'inventer des options",
        "great, thanks for nothing",
        "waarom vraag je dat nou weer",
        "Stop asking, both are fixed.",
        "you're describing the wrong chair again",
    ],
)
def test_complaint_shapes_in_several_languages(text: str) -> None:
    assert is_frustrated(text)


@pytest.mark.parametrize(
    "text",
    [
        "How do I stop repeating myself in presentations?",
        "I read the manual three times and still don't get step 4",
        "Can you read this paragraph and check the grammar?",
        "The printer is repeating the same page again and again",
        "Her exact words were — forget it, nobody does that anymore — so should I try?",
        "Why are onions making me cry?",
    ],
)
def test_look_alikes_of_the_new_shapes_are_not_complaints(text: str) -> None:
    assert not is_frustrated(text)


def test_exact_words_are_reported_speech() -> None:
    assert "forget it" not in strip_quoted("Her exact words were: forget it, it's too late.")


@pytest.mark.parametrize(
    "text", ["Kurze Frage zwischendurch: wie entfernt man eine Zecke?", "domanda a parte: ok?"]
)
def test_side_question_cues(text: str) -> None:
    assert has_cue(text)


def test_a_complaint_near_everything_counts_for_less() -> None:
    hub, plain = (0.8, 0.6, 0.0), (0.0, 0.0, 1.0)
    contrasts = [(1.0, 0.0, 0.0)]
    prototypes = Prototypes.of([hub, plain], contrasts)
    assert prototypes.offsets[0] > 0 > prototypes.offsets[1]  # the hub is pulled down
    # A message nearer to a contrast than to every complaint scores below its cosine.
    message = (0.96, 0.28, 0.0)
    score = prototypes.score(message)
    assert score is not None and score < 0.96 * 0.8 + 0.28 * 0.6 - prototypes.offsets[0]
    assert Prototypes.of([], contrasts).score(message) is None


def test_cohesion_is_the_mean_pairwise_cosine() -> None:
    assert cohesion([(1.0, 0.0), (0.0, 1.0), (1.0, 0.0)]) == pytest.approx(1 / 3)
    assert cohesion([(1.0, 0.0)]) is None
    assert cohesion([]) is None


def test_a_session_of_alike_messages_lowers_the_topic_score() -> None:
    text = "How do I renew my passport?"
    message, a, b = (0.86, 0.51, 0.0), (1.0, 0.0, 0.0), (0.95, 0.0, 0.312)
    params = Params(semantic_threshold=0.84, lexical_weight=0.0, cohesion_weight=0.0)
    tight = analyze(text, [], params, vector=message, recent_vectors=[a, a])
    with_baseline = Params(semantic_threshold=0.84, lexical_weight=0.0, cohesion_weight=0.5)
    lowered = analyze(text, [], with_baseline, vector=message, recent_vectors=[a, a])
    assert tight.score is not None and lowered.score is not None
    assert lowered.score == pytest.approx(tight.score - 0.5 * (1.0 - 0.85))
    assert lowered.topic_shift and not tight.topic_shift
    looser = analyze(text, [], with_baseline, vector=message, recent_vectors=[a, b])
    assert looser.score is not None and looser.score > lowered.score
    assert read(text).candidate
