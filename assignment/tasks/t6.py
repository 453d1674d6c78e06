"""t6, decode attention with a KV cache: one query token per head over the cache (split-KV, then a combine),
memory-bound, in KV bytes read per second against the device copy; then the model's decode step (TBT)."""

from __future__ import annotations

from assignment.tasks import BenchVariant, Profile, TaskCode


def bench_cases(student, reference, quick: bool, shapes=None) -> list:
    import torch.nn.functional as F

    from assignment.perf.cases import (DECODE_SHAPES, DECODE_SHAPES_QUICK, Case, decode_inputs, decode_work,
                                       decoding_with, grouped_pytorch_decode, naive_pytorch_decode, repeat_kv)

    cases = []
    for B, H, H_kv, L, d in shapes or (DECODE_SHAPES_QUICK if quick else DECODE_SHAPES):
        candidates = {
            "naive pytorch": lambda x: naive_pytorch_decode(*x[:3]),
            "pytorch grouped": lambda x: grouped_pytorch_decode(*x[:3]),
            "SDPA": lambda x: F.scaled_dot_product_attention(x[0][:, :, None], *repeat_kv(x[:3])[1:])[:, :, 0],
            "student": decoding_with(student),
        }
        if reference is not None:
            candidates["reference"] = decoding_with(reference)
        flops, bytes_moved = decode_work(B, H, H_kv, L, d)
        cases.append(Case(f"decode B{B} H{H} H_kv{H_kv} L{L} d{d} (KV bytes/s)", decode_inputs(B, H, H_kv, L, d),
                          candidates, flops, bytes_moved, metric="GB/s", percent_of="copy",
                          speedup_over=("naive pytorch", "pytorch grouped", "SDPA")))
    return cases


def split_cases(student, reference, quick: bool) -> list:
    """The reference (else the student) at split counts around the kit's choice: is the choice near the best?"""
    from assignment.perf.cases import DECODE_SHAPES, DECODE_SHAPES_QUICK, Case, decode_inputs, decode_work, naive_pytorch_decode

    kernels = reference or student
    cases = []
    for B, H, H_kv, L, d in (DECODE_SHAPES_QUICK if quick else DECODE_SHAPES):
        make = decode_inputs(B, H, H_kv, L, d)
        sample = make(0)
        chosen = kernels.decode_workspace(sample[0], sample[1]).num_splits
        del sample
        counts = sorted({n for n in (chosen // 4, chosen // 2, chosen - 1, chosen, chosen + 1, chosen + chosen // 2,
                                     2 * chosen, 4 * chosen) if 1 <= n <= 4096})
        candidates = {"naive pytorch": lambda x: naive_pytorch_decode(*x[:3])}
        for n in counts:
            label = f"{n} splits" + (" (kit)" if n == chosen else "")
            candidates[label] = lambda x, n=n: kernels.decode_attention(*x, num_splits=n)[0]
        flops, bytes_moved = decode_work(B, H, H_kv, L, d)
        cases.append(Case(f"decode split sweep B{B} H{H} H_kv{H_kv} L{L} d{d}", make, candidates, flops, bytes_moved,
                          metric="GB/s", percent_of="copy"))
    return cases


def rule_case(rule, student, reference):
    """A kernel rule's case (None for the model rule: its figure comes from the model table)."""
    from assignment.perf.cases import Case, decode_inputs, decode_work, decoding_with, grouped_pytorch_decode

    shape = rule.shape
    if "model" in shape:
        return None
    B, H, H_kv, L, d = shape["B"], shape["H"], shape["H_kv"], shape["L"], shape["d"]
    candidates = {"pytorch grouped": lambda x: grouped_pytorch_decode(*x[:3]), "student": decoding_with(student)}
    if reference is not None:
        candidates["reference"] = decoding_with(reference)
    flops, bytes_moved = decode_work(B, H, H_kv, L, d)
    return Case(f"{CODE.id} rule: decode B{B} H{H} H_kv{H_kv} L{L} d{d} (KV bytes/s)",
                decode_inputs(B, H, H_kv, L, d), candidates, flops, bytes_moved, metric="GB/s", percent_of="copy")


def _ideal_bytes(shape) -> float:
    """q and O: d per (batch, head); LSE: 1; the K/V cache: L·d per (batch, KV head) each."""
    B, H, H_kv, L, d = (shape[k] for k in ("B", "H", "H_kv", "L", "d"))
    return 4.0 * (B * H * (2 * d + 1) + 2 * B * H_kv * L * d)


def _launch(kernels, shape, upload) -> None:
    import torch

    B, H, H_kv, L, d = (shape[k] for k in ("B", "H", "H_kv", "L", "d"))
    q, k, v = upload(B, H, d), upload(B, H_kv, L, d), upload(B, H_kv, L, d)
    lengths = torch.tensor([L], dtype=torch.int32).cuda()  # a full cache; a copy, not a fill kernel
    workspace = kernels.decode_workspace(q, k)              # torch.empty: no kernel either
    kernels.decode_attention(q, k, v, lengths, out=torch.empty_like(q), lse=torch.empty(B, H, device="cuda"),
                             workspace=workspace)


CODE = TaskCode(
    id="t6",
    cuda_file="t6_decode_attention.cu",
    # The model prefills through the causal kernel: its bench runs t4/t5's code, and its grading the kit's.
    bench_needs=("t4", "t5"),
    kit_companions=("t5",),
    bench_metric="GB/s",
    bench_cases=bench_cases,
    bench_variants=(BenchVariant("splits", "the decode kernel at split counts around the kit's choice", split_cases,
                                 quick_settings=True),),
    # Its model table times four paths of a 1B model at two prompts, then a context sweep: minutes more.
    bench_timeout_s=900.0,
    model_bench=True,
    rule_case=rule_case,
    # The graded decode shape, a full 32k cache; two kernels per launch (the split kernel and the combine), and
    # the DRAM throughput against its peak (what a decode kernel is judged on).
    profile=Profile({"B": 1, "H": 32, "H_kv": 8, "L": 32768, "d": 128}, _ideal_bytes, _launch, kernels_per_launch=2,
                    extra_metrics={"dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput (% of peak)"},
                    bandwidth_line=True),
    sanitize_args=("t6",),
)
