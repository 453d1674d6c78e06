"""The benchmark cases and how one is run and printed: what ``make bench`` and the student targets time.

A ``Case`` is one shape: a function making fresh inputs per call, and named candidates (PyTorch baselines, the
student, the reference) that are timed interleaved by ``assignment.perf.timing.measure`` (the grader's
harness). A task's tables are its ``bench_cases`` (``assignment/tasks/``); the attention and decode helpers
here are shared by the tasks and the scaling plots.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = REPO_ROOT / "build" / "bench"
# Loose on purpose: the bench only guards against a fast-but-wrong kernel; the tests grade
# correctness with the registry's tolerances.
BENCH_MAX_RELATIVE_ERROR = 1e-3


@dataclass
class Case:
    label: str
    make_inputs: Callable[[int], Any]
    candidates: dict[str, Callable[[Any], Any]]
    flops: float | None
    bytes_moved: float | None
    metric: str  # "GB/s" or "TFLOP/s": what the row reports
    percent_of: str  # "copy" (bandwidth) or a candidate name (speed relative to it)
    notes: list[str] = field(default_factory=list)
    speedup_over: tuple[str, ...] = ()  # baselines to print the student's and the reference's speedups over
    max_relative_error: float = BENCH_MAX_RELATIVE_ERROR  # of a candidate against the first one, during timing
    tensor_cores: bool = False  # fp16/bf16 tensor-core work: the physical floor takes their peak, not fp32's
    # Entered around the case's timing (run_case): builds what its candidates share (a model) and may leave some out
    # or add notes and ``record`` before any is called; frees it on the way out. None: nothing to build.
    scope: Callable[[Case], contextlib.AbstractContextManager[None]] | None = None
    record: dict[str, Any] = field(default_factory=dict)  # more of the row for the bench's JSON


# --------------------------------------------------------------------------- work counts


def attention_pairs(Lq: int, Lk: int, causal: bool) -> int:
    """(query, key) pairs a query sees: all, or j <= i + Lk - Lq under the causal mask."""
    if not causal:
        return Lq * Lk
    return sum(min(Lk, max(0, i + Lk - Lq + 1)) for i in range(Lq))


def attention_work(
    B: int, H: int, Lq: int, Lk: int, d: int, causal: bool, H_kv: int | None = None, element_bytes: int = 4
) -> tuple[float, float]:
    """(flops, ideal bytes): QKᵀ and PV are 2·d flops per visible pair each; read Q, K, V (H_kv heads, default
    H), write O and LSE once (Q, K, V and O of ``element_bytes`` each: 2 for fp16/bf16; the LSE is float32)."""
    H_kv = H if H_kv is None else H_kv
    flops = 4.0 * B * H * attention_pairs(Lq, Lk, causal) * d
    bytes_moved = element_bytes * B * (H * 2 * Lq * d + H_kv * 2 * Lk * d) + 4.0 * B * H * Lq
    return flops, bytes_moved


def attention_ideal_bytes(shape, element_bytes: int = 4) -> float:
    """``make profile``'s ideal DRAM bytes of an attention launch of ``shape`` (B, H, Lq, Lk, d; H_kv = H)."""
    B, H, Lq, Lk, d = (shape[k] for k in ("B", "H", "Lq", "Lk", "d"))
    return attention_work(B, H, Lq, Lk, d, False, element_bytes=element_bytes)[1]


# --------------------------------------------------------------------------- cases


def _generator(i: int):
    import torch

    return torch.Generator(device="cuda").manual_seed(1000 + i)


def randn(*shape: int, seed: int, scale: float = 1.0, dtype: str = "float32"):
    """Normal random numbers on the GPU from seed ``seed``, of torch dtype ``dtype`` (by name)."""
    import torch

    return torch.randn(*shape, device="cuda", generator=_generator(seed), dtype=getattr(torch, dtype)) * scale


# (B, H, L, d): seed 000's shapes, the B8 H16 L4096, and a spread of seed 002's test table
# (batch B, length N, d, one head) from short-and-wide to long-and-narrow.
ATTENTION_SHAPES = [(8, 16, 4096, 64), (8, 16, 4096, 128), (4, 1, 128, 64), (64, 1, 4096, 64)]
SEED002_SHAPES = [
    (320, 1, 128, 32),
    (160, 1, 128, 64),
    (80, 1, 512, 32),
    (40, 1, 512, 64),
    (20, 1, 2048, 32),
    (500, 1, 2048, 64),
    (100, 1, 4096, 64),
    (10, 1, 8192, 64),
    (4, 1, 16384, 64),
    (2, 1, 32768, 64),
]
# (B, H, H_kv, L, d): grouped-query attention with Llama 3's heads (32 query heads over 8 KV heads), a long prompt.
GQA_SHAPES = [(1, 32, 8, 8192, 64), (1, 32, 8, 8192, 128)]
GQA_SHAPES_QUICK = [(1, 32, 8, 2048, 64), (1, 32, 8, 2048, 128)]


def repeat_kv(qkv):
    """(q, k, v) with K/V of H_kv heads repeated to q's H heads (a copy): the layout of libraries without GQA."""
    from assignment.model.attention import repeat_kv_heads

    q, k, v = qkv
    return q, repeat_kv_heads(k, q.shape[1]), repeat_kv_heads(v, q.shape[1])


def naive_pytorch_attention(qkv, causal: bool):
    """softmax(Q Kᵀ / sqrt(d)) V with the whole score matrix, as PyTorch's users first write it (square L)."""
    import torch

    q, k, v = repeat_kv(qkv)
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s.masked_fill_(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu_(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def attention_candidates(
    student, reference, causal: bool, B: int, H: int, L: int, naive_limit_bytes: float = 24e9
) -> dict[str, Callable[[Any], Any]]:
    """SDPA, the naive versions (while their B*H*L*L scores, written twice, fit the limit), student, reference.

    With K/V of fewer heads than q (GQA), SDPA and the naive versions get them repeated (inside the timed call:
    the copy is part of their cost); the student's and the reference kernels read them as they are.
    """
    import torch.nn.functional as F

    # square L: SDPA's top-left causal alignment is the kit's bottom-right one
    candidates = {"SDPA": lambda qkv: F.scaled_dot_product_attention(*repeat_kv(qkv), is_causal=causal)}
    if 2 * 4.0 * B * H * L * L <= naive_limit_bytes:
        candidates["naive pytorch"] = lambda qkv: naive_pytorch_attention(qkv, causal)
        candidates["naive cuda"] = lambda qkv: student.naive_cuda_attention(*qkv, causal=causal)
    candidates["student"] = lambda qkv: student.flash_attention(*qkv, causal=causal)[0]
    if reference is not None:
        candidates["reference"] = lambda qkv: reference.flash_attention(*qkv, causal=causal)[0]
    return candidates


def cases_attention(student, reference, quick: bool, causal: bool, shapes=None) -> list[Case]:
    shapes = shapes or ATTENTION_SHAPES
    if quick:
        shapes = [(2, 8, 1024, 64), (2, 8, 1024, 128), (4, 1, 128, 64), (8, 1, 2048, 64)]
    cases = []
    for B, H, L, d in shapes:

        def make(i, shape=(B, H, L, d)):
            return tuple(randn(*shape, seed=3 * i + j) for j in range(3))

        candidates = attention_candidates(student, reference, causal, B, H, L)
        flops, bytes_moved = attention_work(B, H, L, L, d, causal)
        label = f"{'causal ' if causal else ''}attention B{B} H{H} L{L} d{d}"
        cases.append(Case(label, make, candidates, flops, bytes_moved, metric="TFLOP/s", percent_of="SDPA"))
    return cases


def cases_gqa(student, reference, quick: bool, causal: bool, shapes=None) -> list[Case]:
    """Grouped-query rows: each kernel on K/V of H_kv heads, and on the same K/V repeated to H heads ("... MHA").

    The two do the same arithmetic on the same values, so their times should match: a kernel that reads the
    shared KV head directly pays nothing for GQA (and moves H / H_kv times fewer K/V bytes).
    """
    import torch.nn.functional as F

    shapes = shapes or (GQA_SHAPES_QUICK if quick else GQA_SHAPES)
    cases = []
    for B, H, H_kv, L, d in shapes:

        def make(i, B=B, H=H, H_kv=H_kv, L=L, d=d):
            q, k, v = (
                randn(B, H, L, d, seed=5 * i),
                randn(B, H_kv, L, d, seed=5 * i + 1),
                randn(B, H_kv, L, d, seed=5 * i + 2),
            )
            _, k_rep, v_rep = repeat_kv((q, k, v))
            return q, k, v, k_rep, v_rep

        candidates = {
            "SDPA": lambda x: F.scaled_dot_product_attention(x[0], x[3], x[4], is_causal=causal),
            "student": lambda x: student.flash_attention(*x[:3], causal=causal)[0],
            "student MHA": lambda x: student.flash_attention(x[0], x[3], x[4], causal=causal)[0],
        }
        if reference is not None:
            candidates["reference"] = lambda x: reference.flash_attention(*x[:3], causal=causal)[0]
            candidates["reference MHA"] = lambda x: reference.flash_attention(x[0], x[3], x[4], causal=causal)[0]
        flops, bytes_moved = attention_work(B, H, L, L, d, causal, H_kv)
        label = f"{'causal ' if causal else ''}attention B{B} H{H} H_kv{H_kv} L{L} d{d} (GQA; MHA: K/V repeated)"
        cases.append(Case(label, make, candidates, flops, bytes_moved, metric="TFLOP/s", percent_of="SDPA"))
    return cases


# (B, H, H_kv, L, d): decode with Llama 3's heads (32 query heads over 8 KV heads), the issue's shapes.
DECODE_SHAPES = [
    (1, 32, 8, 8192, 64),
    (1, 32, 8, 8192, 128),
    (1, 32, 8, 32768, 64),
    (1, 32, 8, 32768, 128),
    (8, 32, 8, 8192, 64),
    (8, 32, 8, 8192, 128),
]
DECODE_SHAPES_QUICK = [(1, 32, 8, 2048, 64), (1, 32, 8, 8192, 128), (4, 32, 8, 2048, 64)]


def decode_work(B: int, H: int, H_kv: int, L: int, d: int) -> tuple[float, float]:
    """(flops, bytes): q·K and p·V are 2·d flops per (query head, key) each; the bytes are the K/V cache read,
    the only traffic that grows with L (q, O and LSE are 2·B·H·(d + 1) floats more)."""
    return 4.0 * B * H * L * d, 2.0 * 4.0 * B * H_kv * L * d


def naive_pytorch_decode(q, k, v):
    """softmax(q Kᵀ / sqrt(d)) V for one query token per head, with K/V repeated per query head (a copy), as users
    first write it: q (B, H, d), k and v (B, H_kv, L, d) -> (B, H, d)."""
    import torch

    _, k, v = repeat_kv((q, k, v))
    scores = (q[:, :, None, :] @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, 1, L)
    return (torch.softmax(scores, dim=-1) @ v)[:, :, 0]


def grouped_pytorch_decode(q, k, v):
    """The same without the copy: the G query heads of a KV head as G rows of one matmul (the model's reference)."""
    import torch

    B, H, d = q.shape
    H_kv = k.shape[1]
    qg = q.view(B, H_kv, H // H_kv, d)
    scores = (qg @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))  # (B, H_kv, G, L)
    return (torch.softmax(scores, dim=-1) @ v).view(B, H, d)


def decode_inputs(B: int, H: int, H_kv: int, L: int, d: int):
    import torch

    def make(i: int):
        q = randn(B, H, d, seed=4 * i)
        k, v = randn(B, H_kv, L, d, seed=4 * i + 1), randn(B, H_kv, L, d, seed=4 * i + 2)
        return q, k, v, torch.full((B,), L, dtype=torch.int32, device="cuda")  # a full cache: L_max = L

    return make


def decoding_with(kernels):
    """A decode candidate as a model calls it: the workspace made once (in the warm-up) and reused, so a timed
    call is the two launches and the wrapper's checks, not allocations."""
    made = {}

    def call(x):
        q, k = x[0], x[1]
        key = (tuple(q.shape), tuple(k.shape))
        if key not in made:
            made[key] = kernels.decode_workspace(q, k)
        return kernels.decode_attention(*x, workspace=made[key])[0]

    return call


# --------------------------------------------------------------------------- running and printing


def _bench_check(reference_name: str, case: Case):
    """check(name, inputs, output) for measure(): compare with the first PyTorch candidate on the same inputs."""

    def check(name: str, inputs, output) -> None:
        if name == reference_name:
            return
        expected = case.candidates[reference_name](inputs)
        error = (output - expected).abs().max().item() / max(expected.abs().max().item(), 1e-30)
        if not error <= case.max_relative_error:
            raise AssertionError(f"{case.label}: {name} is wrong during timing (max relative error {error:.2e})")

    return check


def _usable(case: Case) -> None:
    """Drop candidates that cannot run (a TODO, no reference, out of memory), keeping the reason."""
    import torch

    inputs = case.make_inputs(0)
    for name in list(case.candidates):
        try:
            case.candidates[name](inputs)
        except (NotImplementedError, FileNotFoundError, torch.cuda.OutOfMemoryError, RuntimeError) as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            case.notes.append(f"{name} skipped: {first_line}")
            del case.candidates[name]
    del inputs
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def run_case(case: Case, copy_gbps: float | None, settings: dict) -> dict:
    with case.scope(case) if case.scope is not None else contextlib.nullcontext():
        return _run_case(case, copy_gbps, settings)


def _run_case(case: Case, copy_gbps: float | None, settings: dict) -> dict:
    from assignment.perf.timing import ImpossibleTimeError, measure, ratio

    if case.candidates:
        _usable(case)
    if not case.candidates:
        print_case(case, {}, copy_gbps, None)
        return {"label": case.label, "notes": case.notes, "results": {}} | case.record
    baseline = next(iter(case.candidates))
    error = None
    try:
        results = measure(
            case.candidates,
            case.make_inputs,
            check=_bench_check(baseline, case),
            flops=case.flops,
            bytes_moved=case.bytes_moved,
            tensor_cores=case.tensor_cores,
            **settings,
        )
    except ImpossibleTimeError as exc:
        results, error = exc.results, str(exc)
    row = {
        "label": case.label,
        "flops": case.flops,
        "bytes_moved": case.bytes_moved,
        "notes": case.notes,
        "error": error,
        "results": {n: r.to_dict() for n, r in results.items()},
    } | case.record
    if "student" in results and "reference" in results:
        row["ratio_student_reference"] = ratio(results["student"], results["reference"])
    print_case(case, results, copy_gbps, error)
    return row


def print_case(case: Case, results: dict, copy_gbps: float | None, error: str | None) -> None:
    any_result = next(iter(results.values()), None)
    header = case.label
    if any_result is not None:
        header += f"  (floor {any_result.floor_ms:.4f} ms; stopped: {any_result.stop_reason})"
    print(f"\n{header}")
    percent_label = "% copy" if case.percent_of == "copy" else f"% {case.percent_of}"
    width = max(9, len(percent_label))
    if not results:
        print("  no candidate could run")
    else:
        print(
            f"  {'candidate':<14} {'ms':>10} {case.metric:>9} {percent_label:>{width}} {'rse':>6} {'reps':>5} "
            f"{'÷ reference':>11}"
        )
    reference = results.get("reference")
    for name, r in results.items():
        value = r.gbps if case.metric == "GB/s" else r.tflops
        if case.percent_of == "copy":
            percent = 100 * r.gbps / copy_gbps if copy_gbps and r.gbps else None
        else:
            base = results.get(case.percent_of)
            percent = 100 * base.median_ms / r.median_ms if base else None
        vs_ref = f"{r.median_ms / reference.median_ms:.2f}x" if reference else "-"
        shown = _fmt(value, ".1f" if case.metric == "GB/s" else ".2f")
        print(
            f"  {name:<14} {r.median_ms:>10.4f} {shown:>9} {_fmt(percent, '.0f'):>{width}} "
            f"{100 * r.rse:>5.1f}% {r.reps:>5} {vs_ref:>11}"
        )
    for base in case.speedup_over:
        if base in results:
            shown = [
                f"{who} {results[base].median_ms / results[who].median_ms:.2f}x"
                for who in ("student", "reference")
                if who in results
            ]
            if shown:
                print(f"  speedup over {base}: {', '.join(shown)}")
    for note in case.notes:
        print(f"  note: {note}")
    if error:
        print(f"  IMPOSSIBLE TIME: {error}")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)
