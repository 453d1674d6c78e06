"""The attention seam: every attention call of the model goes through ``attend()`` here.

The model is told which implementation runs (``Transformer(attention_impl=)``, ``load_checkpoint(..., attention=)``):

    "reference"          PyTorch, float32 math, GQA without copying K/V (the default; t7 is graded on it)
    "sdpa"               torch's scaled_dot_product_attention (training and quick runs)
    a ``ModelAttention``  a task's code, as that task declares it: t1 its tiled Python, t5 its causal CUDA kernel,
                         t6 its KV cache, which does the attention itself once the model has caches (prefill
                         through the t5 kernel, decode through the t6 kernel)

The model knows its own two by name and takes a task's as the object its task hands over: ``ATTN=<id>`` is
looked up above the model, in the task modules (``assignment.tasks.attention(name)``), so this package never
imports a task's code (and loads where the task modules are absent).

All of them compute causal attention with bottom-right alignment: query i of Lq sees key j of Lk when
j <= i + Lk - Lq, so a prompt chunk (or one decoded token) attends to the cache so far plus itself.
Shapes: q (B, H, Lq, d); k, v (B, H_kv, Lk, d) with H % H_kv == 0; out (B, H, Lq, d).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from assignment.model.attention_choice import Choice, name_of, task_attention

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]


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


def repeat_kv_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, H_kv, L, d) -> (B, heads, L, d), a copy: for t1, SDPA and the naive baselines, which take one KV head
    per query head."""
    groups = heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


_KIT_FUNCTIONS: dict[str, AttentionFn] = {"reference": reference, "sdpa": sdpa}


def attends_on_cache(choice: Choice) -> bool:
    """Whether ``choice``'s cache does the attention itself: Attention.forward then calls ``cache.attend(...)``."""
    spec = task_attention(choice)
    return spec is not None and spec.cache_class is not None


def cache_class(choice: Choice, impl: str | None = None) -> type:
    """The cache class of attention ``choice`` (one whose cache attends), in implementation ``impl`` (None:
    ``IMPL``)."""
    spec = task_attention(choice)
    if spec is None or spec.cache_class is None:
        raise ValueError(f"attention {name_of(choice)!r} has no cache of its own (the model's KVCache serves it)")
    return spec.cache_class(impl)


def get(choice: Choice, head_dim: int, device: torch.device | str, dtype: torch.dtype | None = None) -> AttentionFn:
    """The function of implementation ``choice``, after checking it can run this model (its head dimension, the
    dtype it computes in) on this device."""
    spec = task_attention(choice)
    if spec is None:
        return _KIT_FUNCTIONS[choice]
    name = name_of(spec)
    if spec.cuda and torch.device(device).type != "cuda":
        raise ValueError(f"attention {name!r} ({spec.label}) runs on CUDA only: run the model on a GPU (device='cuda')")
    if spec.head_dims is not None and head_dim not in spec.head_dims:
        raise ValueError(
            f"attention {name!r} ({spec.label}) supports head dimensions {spec.head_dims}; this model "
            f"has head_dim {head_dim} (use attention='reference')"
        )
    dtype_name = None if dtype is None else str(dtype).removeprefix("torch.")
    if spec.dtypes is not None and dtype_name is not None and dtype_name not in spec.dtypes:
        raise ValueError(
            f"attention {name!r} ({spec.label}) takes {' or '.join(spec.dtypes)}; this model computes in "
            f"{dtype_name} (load it in {' or '.join(spec.dtypes)}, or use attention='reference')"
        )
    return spec.attend


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
