"""t8, FlashAttention on tensor cores: the FlashAttention-2 forward pass in fp16 and bf16 with fp32 accumulation,
on ``mma.sync`` tensor-core instructions, causal or not, grouped-query heads; in TFLOP/s against PyTorch's own
FlashAttention-2 (SDPA's FLASH_ATTENTION backend, named explicitly) with cuDNN's beside it."""

from __future__ import annotations

from ctypes import c_float, c_int, c_void_p
from functools import partial
from typing import TYPE_CHECKING

from assignment.cuda import wrappers as kern
from assignment.model.attention_choice import ModelAttention
from assignment.tasks import BenchVariant, Leaderboard, Profile, Sanitize, TaskCode
from assignment.tasks.t4 import attention_forward, check_timed_attention

if TYPE_CHECKING:  # torch is imported inside the functions: the module loads without it
    import torch

CUDA_FILE = "t8_flash_attention_tc.cu"
DTYPES = ("float16", "bfloat16")  # torch's names: q, k, v and O in one of them
HEAD_DIMS = (64, 128)  # one fragment tile per 16 dims: the kernel is built for these two
FLASH_TC = kern.Export(
    CUDA_FILE,
    "t8_flash_attention_forward",
    (c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int, c_int, c_int, c_int, c_int, c_int, c_float, c_int, c_int),
)
# The configuration (template instance) a call takes, -1 for a refused one: the hidden suite proves its shapes
# reach every one of them on the GPU it runs on.
FLASH_TC_CONFIG = kern.Export(CUDA_FILE, "t8_flash_attention_config", (c_int,) * 6, module=False)


class Kernels:
    """t8's wrappers: methods of ``assignment.kernels.Kernels``."""

    def flash_attention_tc(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        scale: float | None = None,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """FlashAttention forward on tensor cores: q (B,H,Lq,d), k and v (B,H_kv,Lk,d), all float16 or all
        bfloat16, d 64 or 128 -> (o (B,H,Lq,d) in q's dtype, lse (B,H,Lq) float32, natural log).

        As t4/t5's ``flash_attention``: query head h reads KV head h // (H // H_kv); causal: query i sees keys
        j <= i + Lk - Lq (bottom-right alignment); a row that sees no key gives O = 0 and LSE = -inf.
        """
        kernel = "t8_flash_attention_forward"
        state = self.require(FLASH_TC, ("t8",), kernel)
        return attention_forward(
            self,
            FLASH_TC,
            state,
            kernel,
            q,
            k,
            v,
            causal,
            scale,
            out,
            lse,
            head_dims=HEAD_DIMS,
            dtypes=DTYPES,
            last_args=bf16_flag,
        )


def bf16_flag(q: torch.Tensor) -> tuple[int]:
    """The launch's last argument: which of the kernel's two element types q holds (0: fp16, 1: bf16)."""
    import torch

    return (int(q.dtype == torch.bfloat16),)


# --------------------------------------------------------------------------- the baselines: PyTorch's own kernels


_NO_GQA: set[str] = set()  # the SDPA backends that refused grouped K/V heads once (asked again never)


def sdpa_backend(backend: str, qkv, causal: bool):
    """PyTorch's SDPA through exactly one backend (``FLASH_ATTENTION``: FlashAttention-2; ``CUDNN_ATTENTION``),
    never a silent fallback. Grouped K/V heads go in as they are (enable_gqa) where the backend takes them, and
    repeated to q's heads (a copy, inside the timed call) where it does not: the first call finds out which."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from assignment.perf.cases import repeat_kv

    q, k, v = qkv
    with sdpa_kernel(getattr(SDPBackend, backend)):
        if k.shape[1] == q.shape[1]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if backend not in _NO_GQA:
            try:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            except RuntimeError:
                _NO_GQA.add(backend)
        return F.scaled_dot_product_attention(*repeat_kv(qkv), is_causal=causal)


# (B, H, H_kv, L, d): the issue's two shapes, multi-head and Llama 3's grouped heads over a long context.
BENCH_SHAPES = [(8, 16, 16, 4096, 64), (8, 16, 16, 4096, 128), (1, 32, 8, 8192, 64), (1, 32, 8, 8192, 128)]
QUICK_SHAPES = [(2, 16, 16, 2048, 64), (2, 16, 16, 2048, 128), (1, 32, 8, 2048, 128)]
# fp16/bf16 against PyTorch's fp16/bf16: the outputs of two correct kernels differ by a few ulps of the dtype
BENCH_MAX_RELATIVE_ERROR = 2e-2


def attention_case(
    student, reference, B, H, H_kv, L, d, causal: bool, dtype: str, method="flash_attention_tc", baseline="SDPA"
):
    """One row of the table: the kernels' ``method`` (t8's, or t9's of the same signature) against PyTorch's, in
    percent of ``baseline`` (FlashAttention-2, "SDPA"; or cuDNN, "SDPA cuDNN")."""
    from assignment.perf.cases import Case, attention_work, randn

    def make(i):
        q = randn(B, H, L, d, seed=3 * i, dtype=dtype)
        return q, randn(B, H_kv, L, d, seed=3 * i + 1, dtype=dtype), randn(B, H_kv, L, d, seed=3 * i + 2, dtype=dtype)

    candidates = {
        "SDPA": partial(sdpa_backend, "FLASH_ATTENTION", causal=causal),  # the baseline: FlashAttention-2
        "SDPA cuDNN": partial(sdpa_backend, "CUDNN_ATTENTION", causal=causal),
        "student": lambda qkv: getattr(student, method)(*qkv, causal=causal)[0],
    }
    if reference is not None:
        candidates["reference"] = lambda qkv: getattr(reference, method)(*qkv, causal=causal)[0]
    flops, bytes_moved = attention_work(B, H, L, L, d, causal, H_kv, element_bytes=2)
    name = "bf16" if dtype == "bfloat16" else "fp16"
    label = f"{'causal ' if causal else ''}{name} attention B{B} H{H} H_kv{H_kv} L{L} d{d}"
    return Case(
        label,
        make,
        candidates,
        flops,
        bytes_moved,
        metric="TFLOP/s",
        percent_of=baseline,
        notes=["SDPA: PyTorch's FlashAttention-2 (backend FLASH_ATTENTION); SDPA cuDNN: the CUDNN_ATTENTION backend"],
        max_relative_error=BENCH_MAX_RELATIVE_ERROR,
        tensor_cores=True,
    )


def bench_cases(
    dtype, student, reference, quick: bool, method="flash_attention_tc", code=None, baseline="SDPA"
) -> list:
    """The kernel rows in ``dtype``, then the model's time to first token in bf16 (``ttft_cases``); ``method``,
    ``code`` and ``baseline``: another task's kernel of the same signature (t9's), its TaskCode, its baseline."""
    shapes = QUICK_SHAPES if quick else BENCH_SHAPES
    kernel_rows = [
        attention_case(student, reference, *shape, causal=causal, dtype=dtype, method=method, baseline=baseline)
        for shape in shapes
        for causal in (False, True)
    ]
    return kernel_rows + ttft_cases(student, reference, quick, code=code)


def ttft_cases(student, reference, quick: bool, code=None) -> list:
    """Time to first token of the Llama-3.2-1B shape in bf16 at prompts of 1024 and 4096 tokens, batch 1: the kit's
    model with ATTN=t8 (or ``code``'s task: this kernel under IMPL in every layer's prefill) and with ATTN=sdpa,
    against transformers' LlamaForCausalLM with SDPA on the same weights (assignment/perf/prefill_bench.py)."""
    from assignment.perf.prefill_bench import ttft_cases as model_rows

    return model_rows((code or CODE).model_attention)


def rule_case(rule, student, reference, method="flash_attention_tc", task="t8", baseline="SDPA"):
    s = rule.shape
    case = attention_case(
        student,
        reference,
        s["B"],
        s["H"],
        s.get("H_kv", s["H"]),
        s["L"],
        s["d"],
        bool(s["causal"]),
        s["dtype"],
        method=method,
        baseline=baseline,
    )
    case.label = f"{task} rule: {case.label}"
    return case


def timing_workload(
    rule, student, reference, tolerance, base: int, student_model=None, method="flash_attention_tc", task="t8"
):
    """A timing rule's workload: ``method`` of the student's and the reference's kernels (t8's, or t9's of the same
    signature) on fresh inputs, every timed O and LSE checked against the reference's."""
    import torch

    from assignment.perf.workload import Workload, generator
    from assignment.registry import load_registry

    s = rule.shape
    causal = bool(s["causal"])
    dtype = getattr(torch, s["dtype"])
    H_kv = s.get("H_kv", s["H"])
    lse_tolerance = load_registry().task(task).tol("lse")  # float32 from both kernels: the values checks' bound

    def make(i):
        gen = generator(base + i)
        return (
            torch.randn(s["B"], s["H"], s["L"], s["d"], device="cuda", generator=gen, dtype=dtype),
            *(torch.randn(s["B"], H_kv, s["L"], s["d"], device="cuda", generator=gen, dtype=dtype) for _ in range(2)),
        )

    def check(name, qkv, output):
        if name == "student":
            expected = getattr(reference, method)(*qkv, causal=causal)
            check_timed_attention(output, expected, tolerance, lse_tolerance)

    flops = 4.0 * s["B"] * s["H"] * s["L"] * s["L"] * s["d"] * (0.5 if causal else 1.0)
    return Workload(
        make,
        lambda qkv: getattr(student, method)(*qkv, causal=causal),
        lambda qkv: getattr(reference, method)(*qkv, causal=causal),
        partial(sdpa_backend, "FLASH_ATTENTION", causal=causal),
        check,
        flops=flops,
        tensor_cores=True,
    )


# (B, H, H_kv, Lq, Lk, d): grouped heads, lengths off every tile, causal rows that see no key (Lq > Lk), one row
QUICK_CHECK_SHAPES = [(1, 2, 1, 150, 70, 64), (2, 6, 2, 77, 200, 128), (1, 1, 1, 1, 129, 64), (1, 4, 4, 300, 257, 128)]


def quick_check(student, reference, method: str = "flash_attention_tc", task: str = "t8") -> None:
    """O and LSE against the reference on shapes that catch edge bugs, fp16 and bf16, causal and not: what
    grader/tools/open_levels.py checks before timing an open-level kernel (the bounds: the registry's timing check
    for O, its LSE bound for the LSE)."""
    import torch

    from assignment.registry import load_registry
    from assignment.testing import assert_close

    bounds = load_registry().task(task)
    gen = torch.Generator(device="cuda").manual_seed(8)
    for B, H, H_kv, Lq, Lk, d in QUICK_CHECK_SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            q = torch.randn(B, H, Lq, d, device="cuda", generator=gen).to(dtype)
            k, v = (torch.randn(B, H_kv, Lk, d, device="cuda", generator=gen).to(dtype) for _ in range(2))
            for causal in (False, True):
                out, lse = getattr(student, method)(q, k, v, causal=causal)
                expected, expected_lse = getattr(reference, method)(q, k, v, causal=causal)
                what = f" (B {B} H {H} H_kv {H_kv} Lq {Lq} Lk {Lk} d {d} {dtype} causal {causal})"
                assert_close(out, expected, **bounds.timed_tolerance(), name="O" + what)
                assert_close(lse, expected_lse, **bounds.tol("lse"), name="LSE" + what)


def ideal_bytes(shape) -> float:
    from assignment.perf.cases import attention_ideal_bytes

    return attention_ideal_bytes(shape, element_bytes=2)  # Q, K, V, O in 2 bytes; LSE in 4


def launch_attention(kernels, shape, upload, method: str = "flash_attention_tc") -> None:
    """The profiler's launch: ``method`` (t8's kernel, or t9's) once on ``shape`` in bf16."""
    import torch

    B, H, Lq, Lk, d = (shape[k] for k in ("B", "H", "Lq", "Lk", "d"))
    q, k, v = (upload(B, H, n, d, dtype=torch.bfloat16) for n in (Lq, Lk, Lk))
    getattr(kernels, method)(q, k, v, causal=shape["causal"])


class TensorCoreKernels(Kernels, kern.KernelsBase):
    """t8's wrappers on their own, over one implementation's files: what the model's attention runs (every task's
    ``Kernels``, assignment/kernels.py, sits above the task modules)."""


def model_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """The model's attention (prefill and decode steps alike) through ``IMPL``'s t8 kernel: causal, bottom-right
    aligned (a decode step's one query sees the whole cache), the cache's H_kv heads as they are."""
    kernels = kern.under_test(TensorCoreKernels)
    # .contiguous() only packs the (B, H_kv, kv_len, d) slice of the cache's longer buffer.
    out, _ = kernels.flash_attention_tc(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, scale=scale)
    return out


CODE = TaskCode(
    id="t8",
    cuda_file=CUDA_FILE,
    kernels=Kernels,
    bench_metric="TFLOP/s",
    bench_cases=partial(bench_cases, "float16"),
    bench_variants=(
        BenchVariant("bf16", "the same table in bfloat16", partial(bench_cases, "bfloat16")),
        BenchVariant("ttft", "only the model's time to first token rows (Llama-3.2-1B shape, bf16)", ttft_cases),
    ),
    rule_case=rule_case,
    timing_workload=timing_workload,
    profile=Profile(
        {"B": 4, "H": 16, "Lq": 4096, "Lk": 4096, "d": 128, "causal": False},
        ideal_bytes,
        launch_attention,
        extra_metrics={
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe active (%)",
            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared-memory bank conflicts",
        },
    ),
    report_profile=True,
    sanitize=Sanitize("t8_sanitize"),
    quick_check=quick_check,
    leaderboard=Leaderboard(0, "student_tflops", "FlashAttention on tensor cores", "TFLOP/s", True),
    model_attention=ModelAttention(
        model_attention,
        label="your tensor-core kernel",
        description="your tensor-core kernel (`t8_flash_attention_tc.cu`), causal, GQA without copies; a "
        "float16 or bfloat16 model (`DTYPE=bfloat16`)",
        cuda=True,
        head_dims=HEAD_DIMS,
        dtypes=DTYPES,
    ),
)
