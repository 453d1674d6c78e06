"""The theory questions of one student: numbers drawn from the id, the wording, the printing.

Every number of a question is drawn from the student's id and the course's salt (``[theory]`` in the
registry) through SHA-256, never Python's ``hash()`` or ``random``: the same id gets the same questions on
every machine and Python version, and two ids get different numbers. The kinds, their points and tolerances
come from the registry; the questions' wording and the ranges their numbers are drawn from live here.

This package ships to students, so it only *asks*: it computes no answer (nor anything a question could be
checked against). The answer key is the grader's (``grader/grade/theory.py``, instructor-only), computed from the
same ``Question.params``.
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from assignment.registry import Registry, Theory

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._@+-]{0,63}$")
PROOF_KIND = "proof"


class TheoryError(ValueError):
    """A student id, an answers file or a question that cannot be used; the message says what to do."""


def normalise_id(raw: str | None) -> str:
    """The id as the questions are drawn from it: trimmed and lower-case, so 'S123 ' and 's123' agree."""
    student_id = (raw or "").strip().lower()
    if not student_id:
        raise TheoryError("no student id: give it as `make theory ID=<your id>` (or set STUDENT_ID)")
    if not ID_PATTERN.match(student_id):
        raise TheoryError(
            f"student id {raw!r} is not usable: letters, digits and . _ @ + - only, "
            "starting with a letter or digit, at most 64 characters"
        )
    return student_id


# --------------------------------------------------------------------------- drawing numbers


class Draw:
    """A stream of integers from SHA-256 of (salt, id, question): reproducible on any machine and Python."""

    def __init__(self, *key: str):
        self._key = "\x1f".join(key).encode("utf-8")
        self._counter = 0

    def _next(self) -> int:
        digest = hashlib.sha256(self._key + b"\x1e" + str(self._counter).encode()).digest()
        self._counter += 1
        return int.from_bytes(digest[:8], "big")

    def integer(self, low: int, high: int) -> int:
        """An integer in [low, high] (a modulo bias of 2^-50 at most: irrelevant here)."""
        return low + self._next() % (high - low + 1)

    def choice(self, options: tuple | list):
        return options[self._next() % len(options)]


# --------------------------------------------------------------------------- the questions


@dataclass(frozen=True)
class Part:
    key: str  # the answers file's key, e.g. "q1a"
    label: str  # "(a)"
    prompt: str
    unit: str


@dataclass(frozen=True)
class Question:
    number: int
    kind: str  # a registry kind, or "proof" for the written one
    title: str
    text: str  # the statement, every number in it
    params: dict[str, Any]  # the same numbers, for the grader's answer key
    parts: tuple[Part, ...]  # the numeric answers; () for the written proof
    points: float
    rtol: float | None  # None for the written proof
    task: str | None = None  # the task the question belongs to (its points are the task's), None: the course's
    bonus: bool = False  # bonus points: its task is a bonus task

    @property
    def written(self) -> bool:
        return self.kind == PROOF_KIND

    @property
    def key(self) -> str:
        """The answers file's key of a written answer."""
        return f"q{self.number}"

    @property
    def part_points(self) -> float:
        return self.points / len(self.parts) if self.parts else self.points


def number_text(value: float) -> str:
    """Exactly the number the grader uses: 1.5, -0.5, 4, 0.25 (drawn on halves and quarters), -inf."""
    return f"{value:g}"


# Per block: the opt-in maximum of dynamic shared memory; per SM: the whole of it; 1 KB reserved per resident
# block on compute capability 8.0 and later (the CUDA C++ programming guide's tables).
SHARED_MEMORY_GPUS = (
    {"gpu": "NVIDIA H100 (sm_90)", "per_block": 227 * 1024, "per_sm": 228 * 1024, "reserved": 1024},
    {"gpu": "NVIDIA A100 (sm_80)", "per_block": 163 * 1024, "per_sm": 164 * 1024, "reserved": 1024},
    {"gpu": "NVIDIA L4 (sm_89)", "per_block": 99 * 1024, "per_sm": 100 * 1024, "reserved": 1024},
)


# Datasheet figures, dense (no sparsity); fp32 on the CUDA cores (no TF32).
ROOFLINE_GPUS = (
    {"gpu": "NVIDIA H100 SXM", "bf16": 989e12, "fp32": 67e12, "bandwidth": 3.35e12},
    {"gpu": "NVIDIA H200 SXM", "bf16": 989e12, "fp32": 67e12, "bandwidth": 4.8e12},
    {"gpu": "NVIDIA A100 SXM 80GB", "bf16": 312e12, "fp32": 19.5e12, "bandwidth": 2.039e12},
    {"gpu": "NVIDIA L4", "bf16": 121e12, "fp32": 30.3e12, "bandwidth": 0.3e12},
)
# LLaMA-style shapes: hidden, layers, query heads, KV heads, head dim, MLP intermediate, vocabulary.
MODEL_SHAPES = (
    {
        "model": "Llama-3.2-1B",
        "hidden": 2048,
        "layers": 16,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 64,
        "intermediate": 8192,
        "vocab": 128256,
    },
    {
        "model": "Llama-3.2-3B",
        "hidden": 3072,
        "layers": 28,
        "heads": 24,
        "kv_heads": 8,
        "head_dim": 128,
        "intermediate": 8192,
        "vocab": 128256,
    },
    {
        "model": "Llama-3.1-8B",
        "hidden": 4096,
        "layers": 32,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "intermediate": 14336,
        "vocab": 128256,
    },
    {
        "model": "Qwen2.5-0.5B",
        "hidden": 896,
        "layers": 24,
        "heads": 14,
        "kv_heads": 2,
        "head_dim": 64,
        "intermediate": 4864,
        "vocab": 151936,
    },
    {
        "model": "TinyLlama-1.1B",
        "hidden": 2048,
        "layers": 22,
        "heads": 32,
        "kv_heads": 4,
        "head_dim": 64,
        "intermediate": 5632,
        "vocab": 32000,
    },
    {
        "model": "Mistral-7B",
        "hidden": 4096,
        "layers": 32,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "intermediate": 14336,
        "vocab": 32000,
    },
)
DTYPE_BYTES = {"bf16": 2, "fp32": 4}


# In the texts below "~" is a space that a line is never broken at (reflow turns it into a plain one), so that
# "N × d" never ends a line after "N ×".


def _hbm(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    params = {"N": 256 * draw.integer(4, 64), "d": draw.choice((64, 96, 128)), "M": 4096 * draw.integer(3, 12)}
    N, d, M = params["N"], params["d"], params["M"]
    text = f"""\
One attention head, batch 1: Q, K, V and O are N~×~d with N~=~{N} and d~=~{d}; the on-chip SRAM holds
M~=~{M} elements. Count elements moved between HBM and the chip (not bytes), every read and every write;
the score matrices count in full (no causal mask).

Standard attention (Algorithm 0 of the FlashAttention paper): (1) read Q and K, write S~=~QKᵀ (N~×~N);
(2) read S, write P~=~softmax(S); (3) read P and V, write O~=~PV.

FlashAttention in the loop order of the kit's t4 kernel: one block size for queries and keys,
B~=~⌊M~/~(4d)⌋ (a Q block, the output accumulator, a K block and a V block, each B~×~d, fill the SRAM).
The query blocks are processed one after the other. For each: its Q rows are read once, then every row of K
and of V is read once (one pass over K and V per query block), then its O rows and its log-sum-exp values
(one per query row) are written once. The last block may be partial: it moves only the rows it has.
This is the FlashAttention paper's Θ(N²d²/M) bound made concrete."""
    parts = [
        ("standard attention: elements read plus written", "elements"),
        ("FlashAttention: the block size B", "rows"),
        ("FlashAttention: the number of passes over K and V", "passes"),
        ("FlashAttention: elements read plus written (Q, K, V, O and the LSE)", "elements"),
    ]
    return params, text, parts


def _smem(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    params = dict(draw.choice(SHARED_MEMORY_GPUS))
    params.update(
        Br=draw.choice((32, 64, 128)),
        d=draw.choice((64, 96, 128)),
        pad=draw.choice((0, 1, 4)),
        Bc=draw.choice((32, 64)),
    )
    p = params
    text = f"""\
A FlashAttention thread block keeps these fp32 tiles (4 bytes an element) in shared memory: the Q tile
(B_r~×~d), the K tile and the V tile (B_c~×~d each) and the score tile S (B_r~×~B_c). Every row of every
tile is padded with p extra floats against bank conflicts: rows of Q, K and V hold d~+~p floats, rows of S
hold B_c~+~p. Here B_r~=~{p["Br"]}, d~=~{p["d"]} and p~=~{p["pad"]}.

The GPU is an {p["gpu"].replace(" ", "~")}: one block may use at most {p["per_block"]}~bytes
({p["per_block"] // 1024}~KB, the opt-in maximum), one SM has {p["per_sm"]}~bytes ({p["per_sm"] // 1024}~KB), and
{p["reserved"]}~bytes of the SM's shared memory are reserved for each resident block (1~KB~=~1024~bytes)."""
    parts = [
        (f"the tiles' footprint for B_c = {p['Bc']}", "bytes"),
        ("the largest B_c, a multiple of 16, whose footprint fits in one block's maximum", "rows"),
        (
            (
                "how many blocks with the footprint of (a) fit on one SM at once, counting shared memory only "
                "(each takes its footprint plus the reserved bytes; 0 if (a) exceeds one block's maximum)"
            ),
            "blocks",
        ),
    ]
    return params, text, parts


def _roofline(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    params = dict(draw.choice(MODEL_SHAPES))
    gpu = draw.choice(ROOFLINE_GPUS)
    dtype = draw.choice(tuple(DTYPE_BYTES))
    params.update(
        gpu=gpu["gpu"],
        dtype=dtype,
        bytes_per_value=DTYPE_BYTES[dtype],
        peak=gpu[dtype],
        bandwidth=gpu["bandwidth"],
        T=draw.choice((128, 256, 512, 1024, 2048, 4096)),
        C=draw.choice((1024, 2048, 4096, 8192, 16384, 32768)),
    )
    p = params
    text = f"""\
A LLaMA-style decoder shaped like {p["model"]}: hidden size h~=~{p["hidden"]}, {p["layers"]} layers,
{p["heads"]} query heads and {p["kv_heads"]} key/value heads of dimension {p["head_dim"]}, an MLP of intermediate
size {p["intermediate"]} (gate, up and down projections), a vocabulary of {p["vocab"]}; weights and KV cache in
{dtype} ({p["bytes_per_value"]}~bytes a value); batch 1. The GPU: an {p["gpu"].replace(" ", "~")} with a peak of
{number_text(p["peak"] / 1e12)}~TFLOP/s in {dtype} and {number_text(p["bandwidth"] / 1e12)}~TB/s of memory bandwidth
(1~TFLOP/s~=~10¹²~FLOP/s, 1~TB/s~=~10¹²~bytes/s; the roofline ignores whether the weights fit in its memory).

Count this way. Weights: per layer the four attention projections (h~×~heads·head_dim for Q and for the
output, h~×~kv_heads·head_dim for K and for V) and the three MLP matrices (h~×~intermediate each), plus the
LM head (h~×~vocabulary); nothing else (no embedding lookup, norms or biases). FLOPs: 2 per multiply-add;
every weight does one multiply-add per token; attention adds 4~·~head_dim~·~heads~·~queries~·~keys per layer
(QKᵀ and PV; no saving from the causal mask). Bytes: every weight read once per forward pass, plus the KV
cache: prefill writes the K and V of its tokens, decode reads the K and V of every token in the cache;
nothing else (activations are ignored).

Prefill: a prompt of T~=~{p["T"]} tokens (queries~=~keys~=~T; the LM head runs on every position).
Decode: one new token with C~=~{p["C"]} tokens in the cache, its own included (queries~=~1, keys~=~C)."""
    parts = [
        ("prefill: arithmetic intensity, FLOPs over bytes", "FLOP/byte"),
        ("prefill: attainable performance, min(peak, intensity × bandwidth)", "TFLOP/s"),
        ("decode: arithmetic intensity", "FLOP/byte"),
        ("decode: attainable performance", "TFLOP/s"),
        ("decode: the step's shortest possible time, max(FLOPs / peak, bytes / bandwidth)", "ms"),
    ]
    return params, text, parts


def _online_softmax(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    first = [draw.integer(-6, 6) / 2 for _ in range(draw.integer(2, 3))]
    second = [draw.integer(-6, 6) / 2 for _ in range(draw.integer(2, 3))]
    if max(second) <= max(first):  # the running max must grow once, so the rescaling matters
        second[draw.integer(0, len(second) - 1)] = max(max(first), 1.0) + draw.integer(1, 4) / 2
    third = [draw.integer(-6, 9) / 2 for _ in range(draw.integer(2, 3))]
    blocks = [first, second, third]
    values = [[draw.integer(1, 9) for _ in block] for block in blocks]
    lines = "\n".join(
        f"  block {j}: s = [{', '.join(number_text(s) for s in block)}], v = [{', '.join(number_text(v) for v in vs)}]"
        for j, (block, vs) in enumerate(zip(blocks, values), 1)
    )
    text = f"""\
One query's scores arrive in three blocks; each score s comes with a value v (a single number: d~=~1):
{lines}
The state after block j: m_j is the largest score seen so far, l_j~=~Σ~exp(s~−~m_j) and
acc_j~=~Σ~exp(s~−~m_j)~·~v, both sums over every score seen so far (blocks 1..j). Natural exp and ln, no
scale factor; m_0~=~−∞ and l_0~=~acc_0~=~0."""
    parts = [
        ("l_1", "no unit"),
        ("l_2", "no unit"),
        ("acc_2", "no unit"),
        ("l_3", "no unit"),
        ("the output o = acc_3 / l_3", "no unit"),
        ("LSE = m_3 + ln l_3", "no unit"),
    ]
    return {"blocks": blocks, "values": values}, text, parts


def _split_kv(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    count = draw.integer(3, 4)
    # Within 2 of each other: every split's weight shows in the combined LSE (not just the largest one's).
    first = draw.integer(2, 12) / 2
    lse = [first] + [first + draw.integer(-4, 4) / 2 for _ in range(count - 1)]
    outputs = [[draw.integer(1, 32) / 4 for _ in range(2)] for _ in range(count)]
    if draw.integer(0, 2) == 0:  # a split that held no key (a short cache): its weight must come out 0
        empty = draw.integer(1, count - 1)
        lse[empty], outputs[empty] = float("-inf"), [0.0, 0.0]
    lines = "\n".join(
        f"  split {s}: LSE = {number_text(x)}, o = [{', '.join(number_text(v) for v in o)}]"
        for s, (x, o) in enumerate(zip(lse, outputs), 1)
    )
    text = f"""\
A split-KV decode kernel (t6) divided one query's keys into {count} parts. Split s returned o_s, the softmax
over its own keys only applied to their values (d~=~2), and LSE_s~=~ln~Σ~exp(score) over its own keys
(−inf: the split held no key):
{lines}
Combine them into the attention over all the keys."""
    parts = [
        ("the LSE over all the keys", "no unit"),
        ("o[0] over all the keys", "no unit"),
        ("o[1] over all the keys", "no unit"),
    ]
    return {"lse": lse, "outputs": outputs}, text, parts


# --------------------------------------------------------------------------- t8's questions: tensor cores


def _fragments(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    # An element of A in the top-right or bottom-left quarter (so that the order of the quarters, a2 a3 before
    # a4 a5, matters) whose row and column differ mod 8 (so that reading the table transposed names another lane).
    row, col = draw.integer(0, 7), draw.integer(0, 6)
    col += 1 if col >= row else 0
    if draw.integer(0, 1):
        row += 8
    else:
        col += 8
    # An element of B whose column differs from its row mod 8 (again: transposed, another lane).
    b_row = draw.integer(0, 15)
    b_col = draw.integer(0, 6)
    b_col += 1 if b_col >= b_row % 8 else 0
    # A lane whose two numbers differ (l = 4g + t with g != t), so that swapping them names another row and key.
    lane = draw.choice([lane for lane in range(32) if lane // 4 != lane % 4])
    params = {
        "a_row": row,
        "a_col": col,
        "b_row": b_row,
        "b_col": b_col,
        "lane": lane,
        "element": draw.integer(0, 3),
        "ntile": draw.integer(0, 7),
    }
    p = params
    text = """\
One warp runs mma.sync.aligned.m16n8k16.row.col.f32 with fp16 or bf16 inputs (the layout is the same for both):
D~=~A~B~+~C with A of 16~×~16 (rows m, columns k), B of 16~×~8 (rows k, columns n) and C,~D of 16~×~8 in fp32.
Each of the 32 lanes (0~…~31) holds fixed elements of each operand, as the PTX ISA's "Matrix Fragments for
mma.m16n8k16 with floating point type" lays them out (the t8 section draws them). Name them as the PTX ISA
does: a lane holds a0~…~a7 of A, b0~…~b3 of B and c0~…~c3 of C (in kit.cuh, register a[k] holds a(2k) in
its low 16 bits and a(2k+1) in its high ones; mma_m16n8k16's first B register holds b0 and b1, its second b2
and b3; d[i] holds ci).

In t8, a warp's 16~×~64 tile of scores S~=~Q~K_jᵀ is 8 n-tiles of 8 keys (n-tile j holds keys
8j~…~8j~+~7 of the tile), each the C fragment of one mma. pack_p turns the C fragments of n-tiles 2m and
2m~+~1 into the A fragment of P for keys 16m~…~16m~+~15, the A operand of P~V_j, in the same lanes."""
    parts = [
        (f"A: the lane that holds the element in row {p['a_row']}, column {p['a_col']}", "lane"),
        ("A: which of that lane's a0 … a7 it is (the i of ai)", "index"),
        (f"B: the lane that holds the element in row {p['b_row']}, column {p['b_col']}", "lane"),
        ("B: which of that lane's b0 … b3 it is (the i of bi)", "index"),
        (
            f"S: the key (0 … 63, the column of the 16 × 64 tile) of lane {p['lane']}'s c{p['element']} "
            f"of n-tile {p['ntile']}",
            "key",
        ),
        ("that score in P's A fragment after pack_p: which of the lane's a0 … a7 it is (the i of ai)", "index"),
    ]
    return params, text, parts


# The layouts of a 16-bit tile in shared memory: padded by `pad` values a row (0: none), or t8's XOR swizzle.
TILE_LAYOUTS = (
    {"layout": "padded", "pad": 0},
    {"layout": "padded", "pad": 8},
    {"layout": "padded", "pad": 16},
    {"layout": "padded", "pad": 24},
    {"layout": "padded", "pad": 32},
    {"layout": "swizzled", "pad": 0},
)


def _bank_conflicts(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    params = dict(draw.choice(TILE_LAYOUTS))
    rows, cols = draw.choice((64, 128)), draw.choice((64, 128))
    params.update(
        rows=rows,
        cols=cols,
        element=(draw.integer(0, rows - 1), draw.integer(0, cols - 1)),
        block=(draw.integer(0, rows - 16), 16 * draw.integer(0, cols // 16 - 1)),
        column=(draw.integer(0, rows - 32), draw.integer(0, cols - 1)),
        # Without ldmatrix: a0 a1 of an A fragment (Q, P) in one 32-bit load, or b0 of V's B fragment in 16 bits.
        fragment=draw.choice(("a", "v")),
    )
    p = params
    if p["layout"] == "swizzled":
        layout = """\
It is XOR-swizzled as t8 stores its tiles: chunk k of row r (its elements 8k~…~8k~+~7, 16 bytes) is stored at
chunk k~⊕~(r~mod~8) of row r (⊕: bitwise exclusive or), so element (r,~c) is at byte
2rC~+~16~(⌊c/8⌋~⊕~(r~mod~8))~+~2~(c~mod~8)."""
    elif p["pad"]:
        layout = f"""\
Each row is padded with p~=~{p["pad"]} unused values, so element (r,~c) is at byte 2~(r~(C~+~p)~+~c)."""
    else:
        layout = """\
Its rows follow each other with no padding and no swizzle: element (r,~c) is at byte 2~(rC~+~c)."""
    (r2, c2), (r0, c0), (r1, c1) = p["element"], p["block"], p["column"]
    text = f"""\
A tile of R~=~{rows} rows and C~=~{cols} columns of fp16 values (2 bytes each) is stored row-major in shared
memory from byte 0. {layout}

Shared memory has 32 banks of 4 bytes: byte b is in bank ⌊b/4⌋~mod~32. A warp's shared-memory instruction
is served in phases, and a phase takes as many wavefronts (passes) as the largest number of different 4-byte
words that one bank must deliver in it; lanes that read the same word share it. A load of 32 bits or less a
lane is one phase of all 32 lanes. ldmatrix.x4 is one phase per 8~×~8 matrix: the 8 row addresses that lanes
8i~…~8i~+~7 give for matrix i, 16 bytes from each. Count the wavefronts of one instruction, all its phases
together: 1 for a 32-lane load without conflicts, at least 4 for ldmatrix.x4."""
    parts = [
        ("the bytes the tile takes, padding included", "bytes"),
        (f"the bank of the element in row {r2}, column {c2}", "bank"),
        (
            f"ldmatrix.x4 of the 16 × 16 block of rows {r0} … {r0 + 15}, columns {c0} … {c0 + 15} in t8's A "
            f"order: lane L gives the address of row {r0} + (L mod 16), columns {c0} + 8⌊L/16⌋ … + 7",
            "wavefronts",
        ),
        (
            (
                f"32-bit loads, the A fragment's a0 a1 without ldmatrix: lane L = 4g + t reads the elements in row "
                f"{r0} + g, columns {c0} + 2t and {c0} + 2t + 1"
            )
            if p["fragment"] == "a"
            else (
                f"16-bit loads, b0 of V's B fragment without ldmatrix: lane L = 4g + t reads the element in row "
                f"{r0} + 2t, column {c0} + g"
            ),
            "wavefronts",
        ),
        (f"16-bit loads of a column: lane L reads the element in row {r1} + L, column {c1}", "wavefronts"),
    ]
    return params, text, parts


def _attention_intensity(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    gpu = draw.choice(ROOFLINE_GPUS)
    heads = draw.choice((8, 16, 32))
    params = {
        "gpu": gpu["gpu"],
        "peak": gpu["bf16"],  # fp16 and bf16 tensor-core peaks are the same on these GPUs
        "bandwidth": gpu["bandwidth"],
        "dtype": draw.choice(("fp16", "bf16")),
        "B": draw.choice((1, 2, 4, 8, 16)),
        "H": heads,
        "H_kv": heads // draw.choice((1, 4, 8)),
        "L": draw.choice((256, 512, 1024, 1500, 2048, 4096, 6000, 8192, 16384)),
        "d": draw.choice((64, 128)),
        "Br": draw.choice((64, 128)),
    }
    p = params
    text = f"""\
A FlashAttention forward pass on tensor cores in {p["dtype"]} (2~bytes a value), no mask: batch
B~=~{p["B"]}, H~=~{p["H"]} query heads sharing H_kv~=~{p["H_kv"]} key/value heads (query head h reads KV head
⌊h~/~(H/H_kv)⌋), L~=~{p["L"]} queries and L keys a head, head dimension d~=~{p["d"]}.

Count FLOPs as 2 per multiply-add of the two matrix products, QKᵀ and PV, and nothing else (no softmax):
4~·~B~·~H~·~L²~·~d. The ideal traffic between HBM and the chip reads Q, K and V once and writes O once, all in
{p["dtype"]} (K and V have H_kv heads), and writes the log-sum-exp once: one fp32 value (4~bytes) per query
row and head. The GPU: an {p["gpu"].replace(" ", "~")} with a dense fp16/bf16 tensor-core peak of
{number_text(p["peak"] / 1e12)}~TFLOP/s and {number_text(p["bandwidth"] / 1e12)}~TB/s of HBM bandwidth
(1~GFLOP~=~10⁹~FLOP, 1~MB~=~10⁶~bytes, 1~TB/s~=~10¹²~bytes/s)."""
    parts = [
        ("the FLOPs of the forward pass", "GFLOP"),
        ("its ideal traffic", "MB"),
        ("its arithmetic intensity with the ideal traffic, FLOPs over bytes", "FLOP/byte"),
        ("the GPU's ridge point, peak over bandwidth", "FLOP/byte"),
        ("the shortest time the roofline allows, max(FLOPs / peak, bytes / bandwidth)", "µs"),
        (
            f"the arithmetic intensity if L2 never helps: every thread block (one batch element, one query head, "
            f"B_r = {p['Br']} query rows, a head's last block holding the rows left) reads its Q rows and the whole "
            "K and V of its KV head from HBM, and writes its O rows and their LSE",
            "FLOP/byte",
        ),
    ]
    return params, text, parts


PROOF_TEXT = """\
Scores arrive in blocks S_1, …, S_J, each score s with a value vector v_s. Starting from m_0~=~−∞,
l_0~=~0 and acc_0~=~0 (and e^(−∞)~=~0), block j updates
  m_j   = max(m_(j−1), max over s in S_j of s)
  l_j   = e^(m_(j−1) − m_j) · l_(j−1)   + Σ over s in S_j of e^(s − m_j)
  acc_j = e^(m_(j−1) − m_j) · acc_(j−1) + Σ over s in S_j of e^(s − m_j) · v_s
Prove by induction on j that after block j: m_j is the largest score of S_1~∪~…~∪~S_j,
l_j~=~Σ~e^(s~−~m_j) and acc_j~=~Σ~e^(s~−~m_j)~·~v_s, both sums over S_1~∪~…~∪~S_j. Conclude that
acc_J~/~l_J is the softmax-weighted average of the values and that m_J~+~ln~l_J~=~ln~Σ~e^s, and say why no
exponent in the updates is ever positive. Half a page at most; plain text or LaTeX."""

GENERATORS = {
    "hbm": _hbm,
    "smem": _smem,
    "roofline": _roofline,
    "online_softmax": _online_softmax,
    "split_kv": _split_kv,
    "fragments": _fragments,
    "bank_conflicts": _bank_conflicts,
    "attention_intensity": _attention_intensity,
}


def questions_for(student_id: str, theory: Theory) -> list[Question]:
    """Every question of one student, numbered in the registry's order: the course's own, the written proof, then
    those that belong to a task (the course's keep their numbers, and the proof its key, when a task's are added).
    A question's numbers depend on the salt, the id, its kind and its instance only, never on its position."""
    student_id = normalise_id(student_id)
    questions: list[Question] = []
    course_kinds = [kind for kind in theory.kinds if kind.task is None]
    task_kinds = [kind for kind in theory.kinds if kind.task is not None]
    _add_numeric(questions, course_kinds, theory, student_id)
    questions.append(
        Question(
            len(questions) + 1, PROOF_KIND, theory.proof_title, reflow(PROOF_TEXT), {}, (), theory.proof_points, None
        )
    )
    _add_numeric(questions, task_kinds, theory, student_id)
    return questions


def _add_numeric(questions: list[Question], kinds, theory: Theory, student_id: str) -> None:
    for kind in kinds:
        for instance in range(kind.count):
            number = len(questions) + 1
            params, text, parts = GENERATORS[kind.name](Draw(theory.salt, student_id, kind.name, str(instance)))
            questions.append(
                Question(
                    number,
                    kind.name,
                    kind.title,
                    reflow(text),
                    params,
                    tuple(
                        Part(f"q{number}{chr(97 + i)}", f"({chr(97 + i)})", prompt, unit)
                        for i, (prompt, unit) in enumerate(parts)
                    ),
                    kind.points / kind.count,
                    kind.rtol,
                    kind.task,
                    kind.bonus,
                )
            )


# --------------------------------------------------------------------------- printing


def reflow(text: str, width: int = 98) -> str:
    """Prose lines joined and wrapped to ``width`` (never at a "~", which becomes a space); indented lines (lists,
    formulas) and blank lines kept as they are."""
    out: list[str] = []
    prose: list[str] = []
    for line in text.splitlines() + [""]:
        if line and not line.startswith(" "):
            prose.append(line)
            continue
        if prose:
            out.append(textwrap.fill(" ".join(prose), width, break_on_hyphens=False, break_long_words=False))
            prose = []
        out.append(line)
    return "\n".join(out[:-1]).replace("~", " ")


def tolerance_text(rtol: float | None) -> str:
    if rtol is None:
        return "graded by hand"
    return "exact" if rtol == 0 else f"within {number_text(rtol * 100)}% of the key"


def points_text(question: Question) -> str:
    """'3 points', or '3 bonus points of t8' for a question of a bonus task."""
    if question.bonus:
        return f"{number_text(question.points)} bonus points of {question.task}"
    return f"{number_text(question.points)} points{f' of {question.task}' if question.task else ''}"


def theory_points_text(theory: Theory) -> str:
    """'20 points', or '20 points + 8.5 bonus points (the questions of t8)'."""
    bonus_tasks = sorted({kind.task for kind in theory.kinds if kind.bonus})
    text = f"{number_text(theory.regular_points)} points"
    if bonus_tasks:
        text += f" + {number_text(theory.bonus_points)} bonus points (the questions of {', '.join(bonus_tasks)})"
    return text


def render_text(student_id: str, questions: list[Question], registry: Registry) -> str:
    theory = registry.theory
    lines = [
        textwrap.fill(
            f"Theory questions for student {student_id!r}: {registry.title}, {theory_points_text(theory)}",
            100,
            break_long_words=False,
        ),
        f"Your answers go in {theory.answers_file}; `make submit` packs it.",
        "",
    ]
    for q in questions:
        lines.append(f"Q{q.number}. {q.title} ({points_text(q)}, {tolerance_text(q.rtol)})")
        lines += ["  " + line if line else "" for line in q.text.splitlines()]
        for part in q.parts:
            lines.append(
                textwrap.fill(
                    f"{part.label} {part.prompt} [{part.unit}]  -> {part.key}",
                    100,
                    initial_indent="  ",
                    subsequent_indent="      ",
                )
            )
        if q.written:
            lines.append(f"  Write the proof in {theory.answers_file}, [written] {q.key}.")
        lines.append("")
    return "\n".join(lines)


def render_markdown(student_id: str, questions: list[Question], registry: Registry) -> str:
    theory = registry.theory
    lines = [
        f"# Theory questions for `{student_id}`",
        "",
        (
            f"{registry.title}: {theory_points_text(theory)}. Answers go in `{theory.answers_file}` "
            "(`make theory` writes it); `make submit` packs it."
        ),
        "",
    ]
    for q in questions:
        lines += [
            f"## Q{q.number}. {q.title}",
            "",
            f"*{points_text(q)}, {tolerance_text(q.rtol)}.*",
            "",
            "```text",
            q.text,
            "```",
            "",
        ]
        lines += [f"- {part.label} {part.prompt} [{part.unit}]: `{part.key}`" for part in q.parts]
        if q.written:
            lines.append(f"- Your proof: `[written] {q.key}` in `{theory.answers_file}`.")
        lines.append("")
    return "\n".join(lines)
