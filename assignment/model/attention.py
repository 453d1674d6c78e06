"""The attention seam: every attention call of the model goes through ``attend()`` here.

One place decides which implementation runs, by name:

    "reference"  PyTorch, float32 math, GQA without copying K/V (the default; t7 is graded on it)
    "sdpa"       torch's scaled_dot_product_attention (training and quick runs)
    "t1"         the student's tiled Python FlashAttention (t1_attention.py), any device
    "t5"         the student's causal CUDA kernel (t4_flash_attention.cu), CUDA only
    "t6"         the student's KV cache (t6_kv_cache.py) does the attention itself when there is a cache:
                 prefill through the t5 kernel, decode through the t6 kernel; without a cache, as "t5"

All of them compute causal attention with bottom-right alignment: query i of Lq sees key j of Lk when
j <= i + Lk - Lq, so a prompt chunk (or one decoded token) attends to the cache so far plus itself.
Shapes: q (B, H, Lq, d); k, v (B, H_kv, Lk, d) with H % H_kv == 0; out (B, H, Lq, d).

The student implementations are imported only when chosen, so this package loads where the kit's other
modules are absent (the grader's sandbox carries only assignment/model).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
IMPLEMENTATIONS = ("reference", "sdpa", "t1", "t5", "t6")
KERNEL_HEAD_DIMS = (32, 64, 128)  # what the t4/t5 CUDA kernels are built for


def causal_mask(lq: int, lk: int, device: torch.device) -> torch.Tensor:
    """(lq, lk) booleans, True where query i may see key j (bottom-right alignment)."""
    rows = torch.arange(lq, device=device)[:, None]
    cols = torch.arange(lk, device=device)[None, :]
    return cols <= rows + (lk - lq)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale · Q Kᵀ + causal mask) V in float32; query heads share their KV head without a copy."""
    B, H, Lq, d = q.shape
    H_kv, Lk = k.shape[1], k.shape[2]
    groups = H // H_kv
    qg = q.float().reshape(B, H_kv, groups * Lq, d)  # (B, H_kv, G·Lq, d): heads h = g·G .. g·G+G-1
    scores = (qg @ k.float().transpose(-1, -2)) * scale  # (B, H_kv, G·Lq, Lk)
    scores = scores.view(B, H_kv, groups, Lq, Lk)
    scores = scores.masked_fill(~causal_mask(Lq, Lk, q.device), float("-inf"))
    probs = torch.softmax(scores, dim=-1).view(B, H_kv, groups * Lq, Lk)
    out = probs @ v.float()  # (B, H_kv, G·Lq, d)
    return out.view(B, H, Lq, d).to(q.dtype)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    Lq, Lk = q.shape[2], k.shape[2]
    k, v = repeat_kv_heads(k, q.shape[1]), repeat_kv_heads(v, q.shape[1])
    if Lq == Lk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(Lq, Lk, q.device), scale=scale)


def student_t1(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    from assignment.impl import load_python

    t1 = load_python("t1_attention.py")
    heads = q.shape[1]
    out, _ = t1.flash_attention_forward(
        q, repeat_kv_heads(k, heads), repeat_kv_heads(v, heads), causal=True, scale=scale
    )
    return out


def student_t5(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    from assignment.cuda import kernels

    # The kernel takes the cache's H_kv heads as they are (GQA, no repeat); .contiguous() only packs the
    # (B, H_kv, kv_len, d) slice of the cache's longer buffer.
    out, _ = kernels.flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, scale=scale)
    return out


def repeat_kv_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, H_kv, L, d) -> (B, heads, L, d), a copy: for t1, SDPA and the naive baselines, which take one KV head
    per query head."""
    groups = heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


_FUNCTIONS: dict[str, AttentionFn] = {
    "reference": reference,
    "sdpa": sdpa,
    "t1": student_t1,
    "t5": student_t5,
    "t6": student_t5,
}
CACHE_ATTENTION = ("t6",)  # implementations whose cache attends: Attention.forward calls cache.attend(...)


def attends_on_cache(name: str) -> bool:
    return name in CACHE_ATTENTION


def t6_cache_class(impl: str | None = None):
    """The ``KVCache`` class of t6_kv_cache.py in implementation ``impl`` (None: ``IMPL``), running that same
    implementation's kernels (the module's ``kernels`` is pointed at its directory)."""
    from assignment.cuda import kernels
    from assignment.impl import load_python, student_dir

    module = load_python("t6_kv_cache.py", impl)
    if getattr(module, "kernels", None) is kernels:  # the module-level API (IMPL's kernels): bind it, once
        module.kernels = kernels.Kernels(student_dir(impl))
    return module.KVCache


def get(name: str, head_dim: int, device: torch.device | str) -> AttentionFn:
    """The implementation called ``name``, after checking it can run this model on this device."""
    if name not in _FUNCTIONS:
        raise ValueError(f"attention implementation {name!r} is unknown (choose from {', '.join(IMPLEMENTATIONS)})")
    if name in ("t5", "t6"):
        if torch.device(device).type != "cuda":
            raise ValueError(f"attention {name!r} runs the CUDA kernels: run the model on a GPU (device='cuda')")
        if head_dim not in KERNEL_HEAD_DIMS:
            raise ValueError(
                f"attention {name!r}: the kernels support head dimensions {KERNEL_HEAD_DIMS}; this model "
                f"has head_dim {head_dim} (use attention='reference')"
            )
    return _FUNCTIONS[name]


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
