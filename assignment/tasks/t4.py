"""t4, FlashAttention in CUDA (and, through ``attention_code``, t5's causal mask in the same kernel): forward
attention with O and LSE out, in TFLOP/s against PyTorch's SDPA."""

from __future__ import annotations

import math
from collections.abc import Callable
from ctypes import c_float, c_int, c_void_p
from functools import partial
from typing import TYPE_CHECKING

from assignment.cuda import wrappers as kern
from assignment.model.attention_choice import ModelAttention
from assignment.tasks import BenchVariant, Leaderboard, Profile, Sanitize, TaskCode, t2, t3

if TYPE_CHECKING:  # torch is imported inside the functions: the module loads without it
    import torch

CUDA_FILE = "t4_flash_attention.cu"
FLASH = kern.Export(
    CUDA_FILE,
    "t4_flash_attention_forward",
    (
        c_void_p,
        c_void_p,
        c_void_p,
        c_void_p,
        c_void_p,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_float,
        c_int,
        c_void_p,
    ),
)
CAUSAL_REGIONS = ("t4", "t5")  # a causal launch runs t5's regions of the same kernel too


class Kernels:
    """t4's wrappers (t5 is their ``causal=True``): methods of ``assignment.kernels.Kernels``."""

    def flash_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        scale: float | None = None,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """FlashAttention forward: q (B,H,Lq,d), k and v (B,H_kv,Lk,d) -> (o (B,H,Lq,d), lse (B,H,Lq)).

        Grouped-query attention: H_kv divides H and query head h reads KV head h // (H // H_kv), straight
        from k and v (H_kv == H: multi-head attention; H_kv == 1: multi-query attention).
        causal: query i sees keys j <= i + Lk - Lq (bottom-right alignment, t5).
        """
        kernel = "t4_flash_attention_forward"
        state = self.require(FLASH, CAUSAL_REGIONS if causal else ("t4",), kernel)
        return attention_forward(
            self, FLASH, state, kernel, q, k, v, causal, scale, out, lse, head_dims=kern.ATTENTION_HEAD_DIMS
        )

    def naive_cuda_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
    ) -> torch.Tensor:
        """The unfused baseline from this implementation's t2 and t3: S = scale·QKᵀ, P = softmax(S), O = PV.

        Shapes as in ``flash_attention``; with H_kv < H the K/V heads are first repeated to H heads
        (a copy, as an unfused implementation makes one).
        """
        import torch

        kernel = "naive_cuda_attention"
        self.require(t2.SOFTMAX, ("t2",), kernel)
        self.require(t3.GEMM, ("t3",), kernel)
        B, H, H_kv, Lq, Lk, d = kern.attention_shapes(kernel, q, k, v)
        kern.check_layout_and_device(kernel, q=q, k=k, v=v)
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        if q.numel() == 0 or Lk == 0:
            return torch.zeros_like(q)
        if H_kv != H:
            k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
        scores = self.gemm(q.view(B * H, Lq, d), k.view(B * H, Lk, d), trans_b=True, alpha=scale)
        if causal:
            hidden = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu_(Lk - Lq + 1)
            scores.masked_fill_(hidden, float("-inf"))
        probs = self.softmax(scores)  # not in place: kernels may declare x and y __restrict__
        return self.gemm(probs, v.view(B * H, Lk, d)).view(B, H, Lq, d)


def attention_forward(
    kernels,
    export: kern.Export,
    state: kern.FileState,
    kernel: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    out: torch.Tensor | None,
    lse: torch.Tensor | None,
    *,
    head_dims: tuple[int, ...],
    dtypes: tuple[str, ...] | None = None,
    last_args: Callable[[torch.Tensor], tuple[int, ...]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A FlashAttention forward's wrapper once ``kernels.require`` has passed: q, k, v, out and lse checked (q, k and
    v of one of ``dtypes``, as torch names them, None: fp32; O in q's dtype, the LSE in fp32), O zeroed and the LSE
    -inf when no row sees a key, else one launch of ``export`` with (q, k, v, O, LSE, B, H, H_kv, Lq, Lk, d, scale,
    causal, *last_args(q)). t4/t5's ``flash_attention`` and t8's ``flash_attention_tc`` take the same arguments."""
    import torch

    torch_dtypes = None if dtypes is None else tuple(getattr(torch, name) for name in dtypes)
    B, H, H_kv, Lq, Lk, d = kern.attention_shapes(kernel, q, k, v, torch_dtypes)
    if d not in head_dims:
        raise ValueError(f"{kernel}: head dimension d must be one of {head_dims}, got {d}")
    if out is None:
        o = torch.empty_like(q)
    else:  # in q's dtype (an fp32 kernel's message says so in its own words)
        o = kern.check_tensor(kernel, "out", out, dtypes=None if dtypes is None else (q.dtype,))
    kern.check_shape(kernel, "out", o, (B, H, Lq, d), "like q")
    lse = (
        torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)
        if lse is None
        else kern.check_tensor(kernel, "lse", lse)
    )
    kern.check_shape(kernel, "lse", lse, (B, H, Lq), "(B, H, Lq)")
    device = kern.check_layout_and_device(kernel, q=q, k=k, v=v, out=o, lse=lse)
    kern.check_int32(kernel, B=B, H=H, Lq=Lq, Lk=Lk, **{"B*H": B * H})
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if o.numel() == 0 or Lk == 0:  # no query rows, or rows that see no key: zeros and LSE -inf
        return o.zero_(), lse.fill_(float("-inf"))
    kern.launch(
        kernels.function(export, state),
        device,
        kernel,
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        o.data_ptr(),
        lse.data_ptr(),
        B,
        H,
        H_kv,
        Lq,
        Lk,
        d,
        scale,
        int(bool(causal)),
        *(last_args(q) if last_args is not None else ()),
    )
    return o, lse


class AttentionKernels(Kernels, kern.KernelsBase):
    """t4's wrappers on their own, over one implementation's files: what the model's attention runs (every task's
    ``Kernels``, assignment/kernels.py, sits above the task modules)."""


def causal_model_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """The model's attention through ``IMPL``'s causal kernel (t5's mask in this file's kernel): the cache's H_kv
    heads as they are (GQA, no repeat)."""
    kernels = kern.under_test(AttentionKernels)
    # .contiguous() only packs the (B, H_kv, kv_len, d) slice of the cache's longer buffer.
    out, _ = kernels.flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, scale=scale)
    return out


# The model's attention is causal: the causal kernel (t5) can run it, the kernel without the mask (t4) cannot.
CAUSAL_MODEL_ATTENTION = ModelAttention(
    causal_model_attention,
    label="your CUDA kernel",
    description="your causal CUDA kernel (`t4_flash_attention.cu`), GQA without copies",
    cuda=True,
    head_dims=kern.ATTENTION_HEAD_DIMS,
    dtypes=("float32",),
)


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
    candidates = {
        "SDPA": lambda x: F.scaled_dot_product_attention(*repeat_kv(x), is_causal=causal),
        "student": lambda x: student.flash_attention(*x, causal=causal)[0],
    }
    if reference is not None:
        candidates["reference"] = lambda x: reference.flash_attention(*x, causal=causal)[0]
    flops, bytes_moved = attention_work(B, H, L, L, d, causal, H_kv)

    def make(i):
        return randn(B, H, L, d, seed=3 * i), randn(B, H_kv, L, d, seed=3 * i + 1), randn(B, H_kv, L, d, seed=3 * i + 2)

    label = f"{task_id} rule: {'causal ' if causal else ''}attention B{B} H{H} H_kv{H_kv} L{L} d{d}"
    return Case(label, make, candidates, flops, bytes_moved, metric="TFLOP/s", percent_of="SDPA")


def _ideal_bytes(shape) -> float:
    from assignment.perf.cases import attention_ideal_bytes

    return attention_ideal_bytes(shape)  # Q and O: Lq·d each; K and V: Lk·d each; LSE: Lq


def _launch(kernels, shape, upload) -> None:
    import torch

    B, H, Lq, Lk, d = (shape[k] for k in ("B", "H", "Lq", "Lk", "d"))
    q, k, v = upload(B, H, Lq, d), upload(B, H, Lk, d), upload(B, H, Lk, d)
    kernels.flash_attention(
        q, k, v, causal=shape["causal"], out=torch.empty_like(q), lse=torch.empty(B, H, Lq, device="cuda")
    )


def timing_workload(rule, student, reference, tolerance, base: int, student_model=None):
    import torch

    from assignment.perf.workload import Workload, generator

    s = rule.shape
    causal = bool(s.get("causal", False))
    H_kv = s.get("H_kv", s["H"])  # k and v: (B, H_kv, L, d)

    def make(i):
        gen = generator(base + i)
        return (
            torch.randn(s["B"], s["H"], s["L"], s["d"], device="cuda", generator=gen),
            *(torch.randn(s["B"], H_kv, s["L"], s["d"], device="cuda", generator=gen) for _ in range(2)),
        )

    def check(name, qkv, output):
        if name == "student":
            check_timed_attention(output, reference.flash_attention(*qkv, causal=causal), tolerance, tolerance)

    flops = 4.0 * s["B"] * s["H"] * s["L"] * s["L"] * s["d"] * (0.5 if causal else 1.0)
    return Workload(
        make,
        lambda qkv: student.flash_attention(*qkv, causal=causal),
        lambda qkv: reference.flash_attention(*qkv, causal=causal),
        lambda qkv: reference.naive_cuda_attention(*qkv, causal=causal),
        check,
        flops=flops,
    )


def check_timed_attention(output, expected, o_tolerance: dict, lse_tolerance: dict) -> None:
    """A timed attention call's whole output, (O, LSE), against the reference kernel's on the same inputs, each
    within the bound its values checks use: a kernel cannot skip a store on the timed shapes (t4, t5, t8)."""
    from assignment.perf.workload import LAYOUT
    from assignment.testing import assert_close

    (out, lse), (expected, expected_lse) = output, expected
    assert_close(out, expected, **o_tolerance, name="timed O", layout=LAYOUT)
    assert_close(lse, expected_lse, **lse_tolerance, name="timed LSE", layout="batch, head, query")


# (B, H, H_kv, Lq, Lk, d): grouped heads, lengths off every tile, causal rows that see no key (Lq > Lk), one query row,
# one key, and a grid large enough for the reference's 128-row tiles at d = 64 (use_big_d64, on an H100's 132 SMs).
QUICK_CHECK_SHAPES = [
    (1, 2, 1, 150, 70, 64),
    (2, 6, 2, 77, 200, 128),
    (1, 3, 3, 130, 77, 32),
    (1, 1, 1, 1, 129, 64),
    (1, 2, 2, 129, 1, 128),
    (8, 8, 8, 777, 500, 64),
]


def quick_check(student, reference) -> None:
    """O and LSE against the reference on shapes that catch edge bugs, causal and not, with 16-byte-aligned inputs
    and (one shape per d) inputs one float off that alignment: what grader/tools/open_levels.py checks before timing
    an open-level kernel (the bound: the registry's timing check, for O and the LSE alike)."""
    import torch

    from assignment.registry import load_registry
    from assignment.testing import assert_close

    task = load_registry().task("t4")
    gen = torch.Generator(device="cuda").manual_seed(4)

    def tensor(*shape, misaligned=False):  # a view one float into its buffer: the kernel's scalar path
        n = math.prod(shape)
        flat = torch.randn(n + 1, device="cuda", generator=gen)
        return flat[1:].view(shape) if misaligned else flat[:n].view(shape)

    for index, (B, H, H_kv, Lq, Lk, d) in enumerate(QUICK_CHECK_SHAPES):
        for misaligned in (False, True) if index < 3 else (False,):
            q = tensor(B, H, Lq, d, misaligned=misaligned)
            k, v = (tensor(B, H_kv, Lk, d, misaligned=misaligned) for _ in range(2))
            for causal in (False, True):
                out, lse = student.flash_attention(q, k, v, causal=causal)
                expected, expected_lse = reference.flash_attention(q, k, v, causal=causal)
                what = f" (B {B} H {H} H_kv {H_kv} Lq {Lq} Lk {Lk} d {d} causal {causal} misaligned {misaligned})"
                assert_close(out, expected, **task.timed_tolerance(), name="O" + what)
                assert_close(lse, expected_lse, **task.timed_tolerance(), name="LSE" + what)


def attention_code(task_id: str, causal: bool, builds_on: tuple[str, ...] = ()) -> TaskCode:
    """The attention kernel's task, non-causal (t4) or causal (t5, whose regions sit in t4's file)."""
    return TaskCode(
        id=task_id,
        cuda_file=CUDA_FILE,
        kernels=Kernels,  # t5's kernel is t4's (its causal flag): one class serves both
        builds_on=builds_on,
        # The tables time the naive CUDA composition (t3's GEMM, t2's softmax, t3's GEMM) beside the kernel.
        bench_needs=("t2", "t3"),
        bench_metric="TFLOP/s",
        bench_cases=partial(bench_cases, causal),
        bench_variants=(
            BenchVariant(
                "seed002",
                "seed 002's shapes (batch x length x d, one head) instead of the default set",
                partial(seed002_cases, causal),
                quick_settings=True,
            ),
            BenchVariant(
                "gqa",
                "only the grouped-query rows (32 query heads over 8 KV heads, GQA against MHA)",
                partial(gqa_cases, causal),
            ),
        ),
        rule_case=partial(rule_case, task_id),
        timing_workload=timing_workload,
        profile=Profile({"B": 4, "H": 16, "Lq": 4096, "Lk": 4096, "d": 64, "causal": causal}, _ideal_bytes, _launch),
        report_profile=not causal,  # one profile in the report: the kernel, without the mask
        scaling_causal=causal,
        sanitize=Sanitize("t4_sanitize", variant=int(causal)),  # the file's scenario, causal or not
        # The class board ranks by the kernel's TFLOP/s at the multi-head shape of its time-vs-reference rule.
        leaderboard=None if causal else Leaderboard(1, "student_tflops", "FlashAttention", "TFLOP/s", True),
        model_attention=CAUSAL_MODEL_ATTENTION if causal else None,
        quick_check=None if causal else quick_check,  # t4's open-level body, causal launches included
    )


CODE = attention_code("t4", causal=False)
