"""t4, FlashAttention in CUDA (and, through ``attention_code``, t5's causal mask in the same kernel): forward
attention with O and LSE out, in TFLOP/s against PyTorch's SDPA."""

from __future__ import annotations

from functools import partial

from assignment.tasks import BenchVariant, Profile, TaskCode

# Seed 000's and 002's shapes, and Llama 3's grouped heads: in assignment.perf.cases (the scaling plots share them).


def bench_cases(causal: bool, student, reference, quick: bool) -> list:
    from assignment.perf.cases import cases_attention, cases_gqa

    return cases_attention(student, reference, quick, causal) + cases_gqa(student, reference, quick, causal)


def seed002_cases(causal: bool, student, reference, quick: bool) -> list:
    from assignment.perf.cases import SEED002_SHAPES, cases_attention

    return cases_attention(student, reference, False, causal, shapes=SEED002_SHAPES)


def gqa_cases(causal: bool, student, reference, quick: bool) -> list:
    from assignment.perf.cases import cases_gqa

    return cases_gqa(student, reference, quick, causal)


def rule_case(task_id: str, rule, student, reference):
    import torch.nn.functional as F

    from assignment.perf.cases import Case, attention_work, randn, repeat_kv

    shape = rule.shape
    B, H, H_kv, L, d = shape["B"], shape["H"], shape.get("H_kv", shape["H"]), shape["L"], shape["d"]
    causal = bool(shape.get("causal", False))
    candidates = {"SDPA": lambda x: F.scaled_dot_product_attention(*repeat_kv(x), is_causal=causal),
                  "student": lambda x: student.flash_attention(*x, causal=causal)[0]}
    if reference is not None:
        candidates["reference"] = lambda x: reference.flash_attention(*x, causal=causal)[0]
    flops, bytes_moved = attention_work(B, H, L, L, d, causal, H_kv)

    def make(i):
        return randn(B, H, L, d, seed=3 * i), randn(B, H_kv, L, d, seed=3 * i + 1), randn(B, H_kv, L, d, seed=3 * i + 2)
    label = f"{task_id} rule: {'causal ' if causal else ''}attention B{B} H{H} H_kv{H_kv} L{L} d{d}"
    return Case(label, make, candidates, flops, bytes_moved, metric="TFLOP/s", percent_of="SDPA")


def _ideal_bytes(shape) -> float:
    B, H, Lq, Lk, d = (shape[k] for k in ("B", "H", "Lq", "Lk", "d"))
    return 4.0 * B * H * (2 * Lq * d + 2 * Lk * d + Lq)  # Q and O: Lq·d each; K and V: Lk·d each; LSE: Lq


def _launch(kernels, shape, upload) -> None:
    import torch

    B, H, Lq, Lk, d = (shape[k] for k in ("B", "H", "Lq", "Lk", "d"))
    q, k, v = upload(B, H, Lq, d), upload(B, H, Lk, d), upload(B, H, Lk, d)
    kernels.flash_attention(q, k, v, causal=shape["causal"], out=torch.empty_like(q),
                            lse=torch.empty(B, H, Lq, device="cuda"))


def attention_code(task_id: str, causal: bool, builds_on: tuple[str, ...] = ()) -> TaskCode:
    """The attention kernel's task, non-causal (t4) or causal (t5, whose regions sit in t4's file)."""
    return TaskCode(
        id=task_id,
        cuda_file="t4_flash_attention.cu",
        builds_on=builds_on,
        # The tables time the naive CUDA composition (t3's GEMM, t2's softmax, t3's GEMM) beside the kernel.
        bench_needs=("t2", "t3"),
        bench_metric="TFLOP/s",
        bench_cases=partial(bench_cases, causal),
        bench_variants=(
            BenchVariant("seed002", "seed 002's shapes (batch x length x d, one head) instead of the default set",
                         partial(seed002_cases, causal), quick_settings=True),
            BenchVariant("gqa", "only the grouped-query rows (32 query heads over 8 KV heads, GQA against MHA)",
                         partial(gqa_cases, causal)),
        ),
        rule_case=partial(rule_case, task_id),
        profile=Profile({"B": 4, "H": 16, "Lq": 4096, "Lk": 4096, "d": 64, "causal": causal}, _ideal_bytes, _launch),
        report_profile=not causal,  # one profile in the report: the kernel, without the mask
        scaling_causal=causal,
        sanitize_args=("t4", "1" if causal else "0"),  # the driver's attention target and its causal flag
    )


CODE = attention_code("t4", causal=False)
