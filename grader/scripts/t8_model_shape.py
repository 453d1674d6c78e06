"""The t8 kernel at the model's attention shape (B 1, H 32 over H_kv 8, d 64, causal, bf16) beside SDPA's backends,
and the cost of the model's wrapper: why ATTN=t8's prefill trails SDPA at short prompts.

    python3 grader/scripts/t8_model_shape.py      (a GPU host, from the repository root; IMPL picks the code)
"""

from __future__ import annotations

import time

import torch

from assignment import kernels
from assignment.tasks.t8 import model_attention, sdpa_backend


def gpu_us(fn, reps: int = 50) -> float:
    """The median of ``reps`` calls, each between two CUDA events."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return sorted(times)[reps // 2]


def wall_us(fn, reps: int = 200) -> float:
    """Back-to-back calls with one synchronisation at the end: what a model's layer loop sees."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e6


def rows(L: int, B: int = 1, H: int = 32, H_kv: int = 8, d: int = 64) -> dict:
    q = torch.randn(B, L, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # as the model makes it
    k = torch.randn(B, H_kv, L, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, H_kv, L, d, device="cuda", dtype=torch.bfloat16)
    qc = q.contiguous()
    F = torch.nn.functional
    return {
        "t8 kernel (contiguous q)": lambda: kernels.flash_attention_tc(qc, k, v, causal=True),
        "t8 model_attention (strided q)": lambda: model_attention(q, k, v, d**-0.5),
        "FA2 (SDPA FLASH_ATTENTION)": lambda: sdpa_backend("FLASH_ATTENTION", (qc, k, v), True),
        "cuDNN (SDPA CUDNN_ATTENTION)": lambda: sdpa_backend("CUDNN_ATTENTION", (qc, k, v), True),
        "SDPA default (strided q, enable_gqa)": lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True
        ),
    }


def main() -> None:
    print(torch.cuda.get_device_name())
    for L in (1024, 4096):
        print(f"L {L}: B1 H32 Hkv8 d64 causal bf16")
        for name, fn in rows(L).items():
            try:
                print(f"  {name:40s} gpu {gpu_us(fn):8.1f} us   back-to-back wall {wall_us(fn):8.1f} us/call")
            except Exception as exc:  # a backend this GPU lacks: said, and the next row
                print(f"  {name:40s} {type(exc).__name__}: {exc}"[:200])


if __name__ == "__main__":
    main()
