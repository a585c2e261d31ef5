"""The semantic side of the context analyzer: message vectors, topic similarity, complaints.

A message is embedded once (through the `Embedder` port, which the composition root fills
with the local model when the `semantic` extra is installed) and its vector is kept in the
session's analyzer state, so each later message costs one embedding, not one per recent
message. Vectors are stored quantised to int8 and base64-encoded (512 characters for 384
dimensions instead of about 8 KB of JSON floats); the cosine error this adds is below 0.005.

- `topic_similarity`: the mean of two cosines of the new message: to the normalised mean of
  the recent user messages' vectors, and to the nearest of them (on the development sets the
  mix separated new subjects from follow-ups better than either alone).
- `complaint_similarity`: the best cosine to a small set of generic complaints about the
  conversation, in several languages (`COMPLAINTS`), written as general phrasings rather
  than taken from any evaluation case, lowered when the message is nearer still to one of
  a set of contrasts in the same languages (`CONTRASTS`: thanks, follow-ups, new requests,
  annoyance at something else), each complaint's cosine offset by how close it is to the
  contrasts (`Prototypes`: a complaint near everything counts for less).

`SemanticSide` wraps the embedder: when it is missing or fails, every call returns None and the
analyzer falls back to its lexical rules; a failure is logged once per process, not per
message. Given an `EmbedShare` (`share.py`), it charges each message's embedding to it and
tells the analyzer whether another may be embedded now (`admit`).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import struct
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import repeat
from operator import mul, truediv

from gateway.analyzer.share import EmbedShare
from gateway.core.embedding import MAX_QUERY_CHARS, Embedder

log = logging.getLogger(__name__)

# One unit of the int8 code (vectors are unit length: no component exceeds 1).
_SCALE = 127.0
# Long messages are cut before embedding: the model sees 512 tokens at a time, and the opening
# of a message carries its subject (the same cut as every query: one vector per message).
MAX_EMBED_CHARS = MAX_QUERY_CHARS

# Generic complaints about the conversation, one or two per shape (not listening or reading,
# not what was asked, the user's words already given, repeating itself, ignoring or
# contradicting what was said, going in circles, making things up, mixing things up, wrong
# again, starting over, contradicting itself, said at the start, sarcastic thanks, an answer
# about something else) in each covered language. Written as general phrasings, not taken from
# any evaluation case.
COMPLAINTS = (
    "you are not listening to me",
    "that is not what I asked",
    "you misunderstood me again",
    "you keep repeating the same wrong answer",
    "I already told you that, read my message again",
    "this conversation is going nowhere, let us start over",
    "forget everything and reset the conversation",
    "you are confused and mixing things up",
    "are you even reading what I write?",
    "I mentioned that in my first message and you ignored it",
    "you are repeating yourself again",
    "you are making things up, that does not exist",
    "you contradict what you said before",
    "we are going in circles",
    "wrong again, this is the third time",
    "du hörst mir nicht zu, das habe ich nicht gefragt",
    "liest du überhaupt, was ich schreibe? das habe ich dir schon dreimal gesagt",
    "du wiederholst dich, schon wieder dieselbe falsche antwort",
    "tu ne m'écoutes pas, ce n'est pas ce que j'ai demandé",
    "tu lis au moins mes messages ? je l'ai déjà écrit plusieurs fois",
    "encore la même réponse, tu ne fais que répéter",
    "no me estás escuchando, eso no es lo que pregunté",
    "¿lees lo que escribo? ya te lo dije varias veces",
    "te repites, otra vez la misma respuesta equivocada",
    "non mi ascolti, non è quello che ho chiesto",
    "ma leggi quello che scrivo? te l'ho già detto tre volte",
    "você não está me ouvindo, não foi isso que eu perguntei",
    "você lê o que eu escrevo? já falei isso várias vezes",
    "ты меня не слушаешь, я не об этом спрашивал",
    "ты вообще читаешь, что я пишу? я уже три раза сказал",
    "je luistert niet, dat is niet wat ik vroeg",
    "lees je wel wat ik schrijf? dat zei ik al drie keer",
    "nie słuchasz mnie, nie o to pytałem",
    "czy ty w ogóle czytasz moje wiadomości? pisałem to już kilka razy",
    "you contradict yourself, first you said one thing and now the opposite",
    "I said that at the very beginning, why are you suggesting something else?",
    "wow, very helpful, thanks for nothing",
    "that has nothing to do with what I asked",
    "du widersprichst dir, ich hab das doch ganz am anfang geschrieben",
    "tu te contredis, je te l'ai dit dès le début",
    "te contradices, te lo dije desde el principio",
    "ti contraddici, te l'ho detto all'inizio",
    "você se contradiz, eu falei isso logo no começo",
)
# Messages that are no complaint about the conversation but share its surface: thanks,
# follow-ups, a new request, annoyance at somebody or something else, in the same languages. A
# message nearer to one of these than to every complaint is not taken for one: the contrast
# cancels the pull that any short message in the same language has towards a complaint in it.
CONTRASTS = (
    "thanks, that helps, what is the next step?",
    "another question: how do I fix a flat bicycle tyre?",
    "I am so annoyed, my train is late again",
    "danke, das hilft, was ist der nächste schritt?",
    "andere frage: wie flicke ich einen fahrradreifen?",
    "ich ärgere mich so, mein zug ist schon wieder zu spät",
    "merci, ça aide, quelle est la prochaine étape ?",
    "autre question : comment réparer un pneu de vélo ?",
    "ça m'énerve, mon train a encore du retard",
    "gracias, me ayuda, ¿cuál es el siguiente paso?",
    "otra pregunta: ¿cómo arreglo una rueda de bici pinchada?",
    "qué rabia, mi tren llega tarde otra vez",
    "grazie, mi aiuta, qual è il prossimo passo?",
    "altra domanda: come riparo una gomma della bici?",
    "che nervi, il mio treno è di nuovo in ritardo",
    "obrigado, ajuda, qual é o próximo passo?",
    "outra pergunta: como conserto um pneu de bicicleta?",
    "que raiva, meu trem está atrasado de novo",
    "спасибо, помогло, какой следующий шаг?",
    "другой вопрос: как заклеить велосипедную шину?",
    "как же бесит, мой поезд опять опаздывает",
    "bedankt, dat helpt, wat is de volgende stap?",
    "andere vraag: hoe plak ik een fietsband?",
    "ik erger me zo, mijn trein is weer te laat",
    "dzięki, to pomaga, jaki jest następny krok?",
    "inne pytanie: jak załatać dętkę rowerową?",
    "ale mnie to wkurza, mój pociąg znowu się spóźnia",
)


def pack(values: Sequence[float]) -> str:
    """A unit vector as base64 of its int8 code."""
    codes = list(map(round, map(mul, values, repeat(_SCALE))))
    try:
        code = struct.pack(f"{len(codes)}b", *codes)
    except struct.error:  # a component beyond ±1: not quite a unit vector, clamp it
        code = bytes(max(-127, min(127, c)) & 0xFF for c in codes)
    return base64.b64encode(code).decode("ascii")


def unpack(text: str) -> tuple[float, ...] | None:
    """The stored code back as a unit vector; None when it is not one of ours."""
    try:
        code = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    if not code:
        return None
    values = struct.unpack(f"{len(code)}b", code)
    return unit(values)


def floats(vector: bytes) -> tuple[float, ...]:
    """A float32 little-endian vector from the embedder, as Python floats."""
    return struct.unpack(f"<{len(vector) // 4}f", vector)


def unit(values: Sequence[float]) -> tuple[float, ...] | None:
    norm = math.sqrt(sum(map(mul, values, values)))
    if norm == 0.0:
        return None
    return tuple(map(truediv, values, repeat(norm)))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    # map(mul) rather than a generator: the same sum, a third of the time (it runs once per
    # complaint and recent message for every message embedded, on the event loop's thread).
    if len(a) != len(b):
        raise ValueError("vectors of different dimensions")
    total: float = sum(map(mul, a, b))
    return total


def topic_similarity(vector: Sequence[float], recent: Sequence[Sequence[float]]) -> float | None:
    """How close the message is to the session's recent messages: the mean of its cosine to
    their mean direction and to the nearest one. None without comparable vectors."""
    usable = [r for r in recent if len(r) == len(vector)]
    if not usable:
        return None
    centre = unit([sum(column) for column in zip(*usable, strict=True)])
    if centre is None:
        return None
    nearest = max(cosine(vector, r) for r in usable)
    return (cosine(vector, centre) + nearest) / 2


def cohesion(recent: Sequence[Sequence[float]]) -> float | None:
    """How alike the session's recent messages are among themselves: their mean pairwise
    cosine (None with fewer than two comparable vectors). Some sessions (a language, a style)
    sit closer together than others whatever their subject; the topic score is read against
    this baseline (`detect.Params.cohesion_weight`)."""
    usable = [r for r in recent if len(r) == len(recent[0])] if recent else []
    pairs = [cosine(a, b) for i, a in enumerate(usable) for b in usable[i + 1 :]]
    return sum(pairs) / len(pairs) if pairs else None


# model name -> the complaints' and the contrasts' vectors: embedded once per process, whatever
# the number of apps (or tests) that open an embedder of the same model.
_PROTOTYPES: dict[str, Prototypes] = {}


@dataclass(frozen=True, slots=True)
class Prototypes:
    """The complaints' vectors, each with its offset, and the contrasts' vectors.

    A complaint that is close to every contrast is close to most messages in its language (a
    hub): its offset is its mean cosine to the contrasts minus that of the average complaint,
    and is subtracted from its cosine to a message, so every complaint counts on one scale."""

    complaints: list[tuple[float, ...]]
    offsets: list[float]
    contrasts: list[tuple[float, ...]]

    @classmethod
    def of(
        cls, complaints: Sequence[tuple[float, ...]], contrasts: Sequence[tuple[float, ...]]
    ) -> Prototypes:
        hub = [
            sum(cosine(c, n) for n in contrasts) / len(contrasts) if contrasts else 0.0
            for c in complaints
        ]
        mean = sum(hub) / len(hub) if hub else 0.0
        return cls(list(complaints), [h - mean for h in hub], list(contrasts))

    def score(self, vector: Sequence[float]) -> float | None:
        """The best offset cosine to a complaint, lowered by as much as the best contrast beats
        it (a message nearer to a contrast than to every complaint scores below it)."""
        best = max(
            (
                cosine(vector, c) - o
                for c, o in zip(self.complaints, self.offsets, strict=True)
                if len(c) == len(vector)
            ),
            default=None,
        )
        if best is None:
            return None
        rival = max(
            (cosine(vector, n) for n in self.contrasts if len(n) == len(vector)), default=best
        )
        return best - max(0.0, rival - best)


async def _prototype_vectors(embedder: Embedder) -> Prototypes:
    known = _PROTOTYPES.get(embedder.model)
    if known is None:
        found = [floats(v) for v in await embedder.embed(COMPLAINTS + CONTRASTS, query=True)]
        known = Prototypes.of(found[: len(COMPLAINTS)], found[len(COMPLAINTS) :])
        _PROTOTYPES[embedder.model] = known
    return known


class SemanticSide:
    """The analyzer's use of an `Embedder`, or nothing when there is none or it fails."""

    def __init__(self, embedder: Embedder | None, share: EmbedShare | None = None) -> None:
        self.embedder = embedder
        self.share = share
        self._prototypes: Prototypes | None = None
        self._loading: asyncio.Future[Prototypes] | None = None  # shared by concurrent callers
        self._failed_once = False

    @property
    def model(self) -> str | None:
        return None if self.embedder is None else self.embedder.model

    def admit(self) -> bool:
        """May a message be embedded now (the share's bounds, `share.py`)?"""
        return self.share is None or self.share.admit()

    async def warm(self) -> None:
        """Embed the generic complaints and contrasts now (at start, a background job), so the
        first message's verdict does not wait for them; a failure is handled as in `embed`."""
        if self.embedder is None or self._prototypes is not None:
            return
        try:
            await self._known(self.embedder)
        except Exception as exc:  # the optional model: lexical rules until it works
            self._failed(exc)

    async def _known(self, embedder: Embedder) -> Prototypes:
        if self._prototypes is None:
            if self._loading is None:
                self._loading = asyncio.ensure_future(_prototype_vectors(embedder))
            try:
                self._prototypes = await asyncio.shield(self._loading)
            except Exception:
                self._loading = None  # the next message tries again
                raise
        return self._prototypes

    def _failed(self, exc: Exception) -> None:
        if not self._failed_once:
            self._failed_once = True
            log.warning(
                "analyzer embeddings unavailable (%s); using the lexical rules", type(exc).__name__
            )

    async def embed(self, text: str) -> tuple[float, ...] | None:
        """The message's unit vector, or None (no embedder, nothing to embed, or a failure).
        Its duration is charged to the share (the complaints' one-off embedding is not)."""
        if self.embedder is None or not text.strip():
            return None
        try:
            share = self.share
            # Held from before the complaints' one-off embedding (messages admitted meanwhile
            # count as waiting), charged for the message's own.
            with share.holding() if share is not None else nullcontext():
                await self._known(self.embedder)
                with share.charging() if share is not None else nullcontext():
                    (vector,) = await self.embedder.embed([text[:MAX_EMBED_CHARS]], query=True)
        except Exception as exc:  # any failure of the optional model: lexical rules instead
            self._failed(exc)
            return None
        return floats(vector)

    def complaint_similarity(self, vector: Sequence[float]) -> float | None:
        if self._prototypes is None:
            return None
        return self._prototypes.score(vector)
