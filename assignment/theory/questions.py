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
}


def questions_for(student_id: str, theory: Theory) -> list[Question]:
    """Every question of one student, numbered in the registry's order, the written proof last."""
    student_id = normalise_id(student_id)
    questions: list[Question] = []
    for kind in theory.kinds:
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
                )
            )
    questions.append(
        Question(
            len(questions) + 1, PROOF_KIND, theory.proof_title, reflow(PROOF_TEXT), {}, (), theory.proof_points, None
        )
    )
    return questions


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


def render_text(student_id: str, questions: list[Question], registry: Registry) -> str:
    theory = registry.theory
    lines = [
        f"Theory questions for student {student_id!r}: {registry.title}, {number_text(theory.points)} points",
        f"Your answers go in {theory.answers_file}; `make submit` packs it.",
        "",
    ]
    for q in questions:
        lines.append(f"Q{q.number}. {q.title} ({number_text(q.points)} points, {tolerance_text(q.rtol)})")
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
            f"{registry.title}: {number_text(theory.points)} points. Answers go in `{theory.answers_file}` "
            "(`make theory` writes it); `make submit` packs it."
        ),
        "",
    ]
    for q in questions:
        lines += [
            f"## Q{q.number}. {q.title}",
            "",
            f"*{number_text(q.points)} points, {tolerance_text(q.rtol)}.*",
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
