"""t9, FlashAttention-3 on Hopper: t8's forward pass (fp16/bf16 in, fp32 accumulation, causal, grouped-query heads)
on Hopper's own machinery, TMA copies completed on mbarriers, wgmma from shared memory, a producer warpgroup and
consumer warpgroups that take turns at the tensor cores; in TFLOP/s against PyTorch's cuDNN attention (SDPA's
CUDNN_ATTENTION backend) with FlashAttention-2 beside it. Only a Hopper GPU (H100, H200) runs it (registry: device
"hopper"); the table, the timing rules, the sanitizer and the model's attention are t8's, called on this kernel."""

from __future__ import annotations

from ctypes import c_float, c_int, c_void_p
from functools import partial
from typing import TYPE_CHECKING

from assignment.cuda import wrappers as kern
from assignment.cuda.toolchain import hopper_absent
from assignment.model.attention_choice import ModelAttention
from assignment.tasks import BenchVariant, Leaderboard, Profile, Sanitize, TaskCode, t8
from assignment.tasks.t4 import attention_forward

if TYPE_CHECKING:  # torch is imported inside the functions: the module loads without it
    import torch

CUDA_FILE = "t9_flash_attention_hopper.cu"
METHOD = "flash_attention_hopper"
BASELINE = "SDPA cuDNN"  # the bench's percentages and the student targets: cuDNN, the fastest attention PyTorch has
FLASH_HOPPER = kern.Export(
    CUDA_FILE,
    "t9_flash_attention_forward",
    (c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int, c_int, c_int, c_int, c_int, c_int, c_float, c_int, c_int),
)


class NotAvailableOnThisGPU(RuntimeError):
    """t9's kernel was called on a GPU that is not a Hopper GPU (its sm_90a code runs on compute capability 9.0 only)."""


class Kernels:
    """t9's wrappers: methods of ``assignment.kernels.Kernels``."""

    def flash_attention_hopper(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        scale: float | None = None,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """FlashAttention-3 forward on Hopper: q (B,H,Lq,d), k and v (B,H_kv,Lk,d), all float16 or all bfloat16, d 64
        or 128 -> (o (B,H,Lq,d) in q's dtype, lse (B,H,Lq) float32, natural log). The same contract as t8's
        ``flash_attention_tc``: query head h reads KV head h // (H // H_kv); causal: query i sees keys
        j <= i + Lk - Lq; a row that sees no key gives O = 0 and LSE = -inf.

        Raises NotAvailableOnThisGPU on a GPU that is not a Hopper GPU (H100, H200)."""
        kernel = "t9_flash_attention_forward"
        state = self.require(FLASH_HOPPER, ("t9",), kernel)
        if q.is_cuda and (absent := hopper_absent()):
            raise NotAvailableOnThisGPU(f"{kernel}: t9 is not available on this GPU: {absent}")
        return attention_forward(
            self,
            FLASH_HOPPER,
            state,
            kernel,
            q,
            k,
            v,
            causal,
            scale,
            out,
            lse,
            head_dims=t8.HEAD_DIMS,
            dtypes=t8.DTYPES,
            last_args=t8.bf16_flag,
        )


class HopperKernels(Kernels, kern.KernelsBase):
    """t9's wrappers on their own, over one implementation's files: what the model's attention runs."""


def model_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """The model's attention (prefill and decode steps alike) through ``IMPL``'s t9 kernel: causal, bottom-right
    aligned, the cache's H_kv heads as they are."""
    kernels = kern.under_test(HopperKernels)
    out, _ = kernels.flash_attention_hopper(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, scale=scale)
    return out


def bench_cases(dtype: str, student, reference, quick: bool) -> list:
    """t8's table on this kernel, against cuDNN (SDPA's CUDNN_ATTENTION backend), then the model's time to first
    token with ATTN=t9."""
    return t8.bench_cases(dtype, student, reference, quick, method=METHOD, code=CODE, baseline=BASELINE)


def ttft_cases(student, reference, quick: bool) -> list:
    return t8.ttft_cases(student, reference, quick, code=CODE)


CODE = TaskCode(
    id="t9",
    cuda_file=CUDA_FILE,
    kernels=Kernels,
    bench_metric="TFLOP/s",
    bench_cases=partial(bench_cases, "float16"),
    bench_variants=(
        BenchVariant("bf16", "the same table in bfloat16", partial(bench_cases, "bfloat16")),
        BenchVariant("ttft", "only the model's time to first token rows (Llama-3.2-1B shape, bf16)", ttft_cases),
    ),
    rule_case=partial(t8.rule_case, method=METHOD, task="t9", baseline=BASELINE),
    timing_workload=partial(t8.timing_workload, method=METHOD, task="t9"),
    profile=Profile(
        {"B": 4, "H": 16, "Lq": 4096, "Lk": 4096, "d": 128, "causal": False},
        t8.ideal_bytes,
        partial(t8.launch_attention, method=METHOD),
        extra_metrics={
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe (wgmma) active (%)",
            "smsp__warp_issue_stalled_barrier_per_warp_active.pct": "warps stalled at a barrier (%)",
        },
    ),
    report_profile=True,
    sanitize=Sanitize("t9_sanitize"),
    quick_check=partial(t8.quick_check, method=METHOD, task="t9"),
    leaderboard=Leaderboard(0, "student_tflops", "FlashAttention-3 on Hopper", "TFLOP/s", True),
    model_attention=ModelAttention(
        model_attention,
        label="your Hopper kernel",
        description="your FlashAttention-3 kernel (`t9_flash_attention_hopper.cu`, H100/H200 only), causal, GQA "
        "without copies; a float16 or bfloat16 model (`DTYPE=bfloat16`)",
        cuda=True,
        head_dims=t8.HEAD_DIMS,
        dtypes=t8.DTYPES,
    ),
)
