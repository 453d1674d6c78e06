"""The course's kinds of numeric theory question, and what every kind draws and writes its numbers with.

A kind is a function of a ``Draw`` (a stream of integers from SHA-256 of the course's salt, the student's id, the
kind and its instance) that returns the question's numbers (``params``, which the grader's answer key reads), its
statement and its parts (a prompt and a unit each). The numbers' ranges, the hardware and model tables they are
drawn from, and the wording live here; the registry gives each kind its points and tolerance. The tensor-core
kinds are kinds_tensor_cores.py's, the Hopper ones kinds_hopper.py's; questions.py numbers them all and prints
them. Nothing here computes an answer.
"""

from __future__ import annotations

import hashlib

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


COURSE_KINDS = {
    "hbm": _hbm,
    "smem": _smem,
    "roofline": _roofline,
    "online_softmax": _online_softmax,
    "split_kv": _split_kv,
}
