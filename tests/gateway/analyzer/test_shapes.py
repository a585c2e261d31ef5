"""Complaint shapes in several languages, the complaint prototypes' calibration, the
session's own similarity baseline for topic shifts, and which messages may open a new subject
(cued requests, acknowledgements, questions without their question mark)."""

import pytest

from gateway.analyzer.corrections import CORRECTIONS, corrections
from gateway.analyzer.detect import Params, analyze, is_frustrated, read, similar_complaint
from gateway.analyzer.quoting import strip_quoted
from gateway.analyzer.replies import REPLIES, replies
from gateway.analyzer.semantic import Prototypes, cohesion
from gateway.analyzer.structure import SHAPE_SIZE, has_cue, shape


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
    ("text", "own"),
    [
        ("My colleague: you are confused, reset everything. Is that right?", "Is that right?"),
        ("My colleague: — you are confused, start over. Is that right?", "Is that right?"),
        ("From the ticket - You are wrong again, this is useless. What should I reply?", "reply"),
        ("Mein Chef: du bist verwirrt, vergiss das. Stimmt das?", "Stimmt das?"),
        ("Mon patron : tu es perdu, recommence. C'est vrai ?", "vrai"),
    ],
)
def test_a_speakers_label_opens_reported_speech(text: str, own: str) -> None:
    left = strip_quoted(text)
    assert own in left and "you" not in left.lower() and "tu " not in left
    assert not is_frustrated(text)


@pytest.mark.parametrize(
    "text",
    [
        "The problem: you keep forgetting what I said, start over.",
        "Listen: you are wrong, reset everything.",
        "Honestly - you're confused, let's start over.",
        # Someone addressing the assistant, or the user's or the assistant's own messages:
        "My friend - you are wrong again, you keep forgetting what I said.",
        "My message: you ignored it again, you keep forgetting what I said.",
        "That reply – no, you are wrong again, start over.",
        "This answer from you: completely wrong, you keep forgetting my question.",
        "The user: that's me, and you keep forgetting what I said.",
        "A teacher: you said I was one, you are confused again.",
        "Il mio messaggio: l'hai ignorato di nuovo, sei confuso.",
    ],
)
def test_a_colon_alone_is_not_a_label(text: str) -> None:
    assert strip_quoted(text) == text
    assert is_frustrated(text)


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


@pytest.mark.parametrize(
    "text",
    [
        # contradicting itself
        "You contradicted yourself about the paint.",
        "du widersprichst dir schon wieder",
        "tu te contredis complètement",
        "te contradices cada vez",
        "ti contraddici di continuo",
        "vc tá se contradizendo",
        "je spreekt jezelf tegen",
        "przeczysz sam sobie",
        # going in circles
        "this is going round in circles",
        "tu tournes en rond avec ce budget",
        "estamos dando vueltas sin avanzar",
        "você está andando em círculos",
        "du drehst dich im Kreis",
        "kręcimy się w kółko",
        # the user's words given at the start or in a named message
        "I told you right at the start it runs on batteries.",
        "The size is in my first message.",
        "ich hab dir gleich am anfang gesagt, dass es Holz ist",
        "je te l'ai dit dès le début, c'est en laine",
        "te lo dije desde el principio, es de madera",
        "te l'ho scritto all'inizio che è di legno",
        "eu disse logo no início que é de madeira",
        "ik zei in het begin al dat het hout is",
        "pisałem na początku, że to drewno",
        # counted repetitions and "you keep …" in the other languages
        "That's the 4th time you've recommended the same shop.",
        "c'est la troisième fois que tu me proposes ça",
        "es la tercera vez que me preguntas lo mismo",
        "è la terza volta che mi chiedi la stessa cosa",
        "por que você fica repetindo a mesma coisa?",
        "me lo vuelves a explicar igual",
        "je blijft maar hetzelfde voorstellen",
        # not reading, an answer about something else, dropping the conversation
        "tu lis pas ce que je t'envoie",
        "du liest nicht, was ich schreibe",
        "This has nothing to do with what I asked.",
        "nada que ver con lo que te pregunté",
        "Let's scrap this whole conversation.",
        "well, start over then",
        "bon, on recommence",
        "vergiss einfach alles, bitte",
        # praise with an eye-roll
        "great, really useful 🙄",
        "danke für nix",
    ],
)
def test_more_complaint_shapes_in_several_languages(text: str) -> None:
    assert is_frustrated(text)


@pytest.mark.parametrize(
    "text",
    [
        "I'm fed up with this landlord, can I break the lease?",
        "I'm so tired of this weather",
        "The round and round stitch pattern, how do I close it?",
        "My teacher told me at the start that it takes a year. Is that true?",
        "thanks, really useful! 👍",
    ],
)
def test_look_alikes_of_the_newer_shapes_are_not_complaints(text: str) -> None:
    assert not is_frustrated(text)


@pytest.mark.parametrize(
    ("text", "flag"),
    [
        ("I'll clear the cache and restart the server", "work_reset"),
        ("voy a resetear la máquina y empezar de nuevo a coser", "work_reset"),
        ("je vais recommencer la manche depuis le début", "work_reset"),
        ("kann ich das Formular zurücksetzen?", "work_reset"),
        ("ricomincio da capo con il primo capitolo", "work_reset"),
        ("hm. and if that doesn't work either?", "follow_up"),
        ("ok. und wie oft muss ich das machen?", "follow_up"),
        ("et si je le laisse sécher une nuit ?", "follow_up"),
    ],
)
def test_reset_words_about_the_work_and_follow_ups_keep_the_similarity_out(
    text: str, flag: str
) -> None:
    reading = read(text)
    assert getattr(reading, flag)
    assert not reading.complains
    assert not similar_complaint(reading, 0.99, Params())  # however close to a complaint


def test_a_cue_keeps_the_similarity_out() -> None:
    reading = read("by the way, the frame is aluminium")
    assert reading.cue and not similar_complaint(reading, 0.99, Params())
    assert similar_complaint(read("the frame is aluminium, again"), 0.99, Params())


@pytest.mark.parametrize(
    ("text", "candidate"),
    [
        # a cue that announces a request, or stands alone
        ("btw how do I descale a kettle", True),
        ("random question, is it ok to freeze bread twice", True),
        ("Totally unrelated but can you recommend a podcast", True),
        ("Change of subject. My sister's wedding is in May, what should I wear?", True),
        ("Different topic: I need a gift for a ten-year-old.", True),
        ("oh before I forget, how do I remove rust from scissors", True),
        # a cue that introduces a detail about the current subject
        ("by the way, the wall is plasterboard", False),
        ("btw the oven is a fan oven. Does that change the time?", False),
        ("übrigens, der Rahmen ist aus Alu, falls das wichtig ist", False),
        ("por cierto, el tejido es algodón", False),
        # an acknowledgement, then a question: it reacts to the answer
        ("Alright. Which one would you try first?", False),
        ("ok, e poi quanto tempo aspetto?", False),
        # "is there …" in other languages asks about something on the table
        ("gibt es dafür einen Trick?", False),
        ("y a-t-il une astuce pour ça ?", False),
        # a question word without its question mark, in the other languages
        ("wat is de beste manier om brood te bakken", True),
        ("jak zrobić dobrą kawę w domu", True),
    ],
)
def test_which_messages_may_open_a_new_subject(text: str, candidate: bool) -> None:
    assert read(text).candidate is candidate


@pytest.mark.parametrize(
    ("text", "cue", "want"),
    [
        # asks, points back, yes/no, back reference, opening acknowledgement, opening
        # continuation word, a cue announcing a request
        ("where is the tallest lighthouse", False, (1, 0, 0, 0, 0, 0, 0)),
        ("and what about it?", False, (1, 1, 0, 1, 0, 1, 0)),
        ("is that normal?", False, (1, 1, 1, 1, 0, 0, 0)),
        ("ok, thanks. what next?", False, (1, 1, 0, 0, 1, 0, 0)),
        ("the soil stays wet", False, (0, 0, 0, 0, 0, 0, 0)),
        ("by the way, how tall is the etna?", True, (1, 0, 0, 0, 0, 0, 1)),
        ("btw, the wall is plasterboard", True, (0, 0, 0, 0, 0, 0, 0)),
    ],
)
def test_the_shape_the_learned_shift_model_reads(
    text: str, cue: bool, want: tuple[int, ...]
) -> None:
    assert has_cue(text) is cue
    assert shape(text, cue) == tuple(map(bool, want))
    assert len(want) == SHAPE_SIZE


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # insisting on what the user said before, in every covered language, with and
        # without accents
        ("i told you it's a cat, not a dog", (1, 0)),
        ("as i said, it's 2 kids", (1, 0)),
        ("ich hab doch geschrieben KEIN keller", (1, 0)),
        ("ich habe es dir schon gesagt", (1, 0)),
        ("je t'ai dit 8-10 ans", (1, 0)),
        ("te he dicho que son de los 80", (1, 0)),
        ("eu disse 10 MESES", (1, 0)),
        ("ti ho detto che è piccolo", (1, 0)),
        ("ik zei toch dat het een huurhuis is", (1, 0)),
        ("pisalam ze pracuje NA ZMIANY", (1, 0)),
        # a count of times
        ("ca fait 3 fois que tu me ressors la meme position", (0, 1)),
        ("ja é a terceira vez que me dizes isso", (0, 1)),
        ("voor de VIJFDE keer hetzelfde", (0, 1)),
        ("po raz trzeci dostaje ta sama liste", (0, 1)),
        # neither: somebody else's words, a request, a frequency, a product
        ("my landlord told me the boiler is new", (0, 0)),
        ("i asked the locksmith and he said no", (0, 0)),
        ("ich habe gefragt ob ich das zurückgeben kann", (0, 0)),
        ("quiero que me explique la diferencia entre IVA y IRPF", (0, 0)),
        ("eu falei com o médico e ele concordou", (0, 0)),
        ("ho detto al mio capo che arrivo tardi", (0, 0)),
        ("ik vroeg me af of dat kan", (0, 0)),
        ("pytałam lekarza i mówi że to nic", (0, 0)),
        ("take it 3 times a day", (0, 0)),
        ("2 razy w tygodniu wystarczy?", (0, 0)),
        ("was ist 2 mal 3", (0, 0)),
    ],
)
def test_what_the_user_said_before_as_features(text: str, want: tuple[int, ...]) -> None:
    assert corrections(text) == tuple(map(bool, want))
    assert len(want) == CORRECTIONS


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # asking for a shorter reply, in every covered language
        ("mate this is like the fifth wall of text. just tell me yes or no", (1, 0)),
        ("kannst dus bitte kuerzer machen, zwei saetze reichen", (1, 0)),
        ("trop long. en deux phrases stp", (1, 0)),
        ("mucho texto. resumemelo en una frase porfa", (1, 0)),
        ("toda resposta vem com 15 topicos, um textão. em uma linha", (1, 0)),
        ("mi servono due righe, non un manuale", (1, 0)),
        ("kan het korter? dit is een lap tekst", (1, 0)),
        ("za dlugo. w dwoch zdaniach: co mam sprawdzic?", (1, 0)),
        # pointing out a contradiction
        ("earlier you told me to open it and now you say never open it?? pick one", (0, 1)),
        ("erst sagst du mehr kleber, jetzt weniger. ja was denn nun", (0, 1)),
        ("tout a l'heure c'etait 10 min et maintenant 30 ?", (0, 1)),
        ("antes me dijiste que mirara al arbol y ahora los pies?? en que quedamos", (0, 1)),
        ("primeiro vc mandou colocar mais agua, agora e menos agua??", (0, 1)),
        ("prima mi dici 3 ore, ora 5. deciditi", (0, 1)),
        ("eerst zeg je donker naar licht, nu licht naar donker", (0, 1)),
        ("najpierw ze lampka za slaba, teraz ze za mocna. to w koncu jak?", (0, 1)),
        # neither
        ("how long should it dry before the second coat?", (0, 0)),
        ("wie lange muss das trocknen?", (0, 0)),
        ("merci, c'est clair", (0, 0)),
        ("el arbol esta a dos metros de la pared", (0, 0)),
        ("", (0, 0)),
    ],
)
def test_what_the_user_says_of_the_replies_as_features(text: str, want: tuple[int, ...]) -> None:
    assert replies(text) == tuple(map(bool, want))
    assert len(want) == REPLIES
