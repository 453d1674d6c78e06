"""t1, attention in Python: the naive and the tiled (FlashAttention) forward in PyTorch, on any device.

Its checks are its tests; the kit runs no bench, profile or sanitizer for it. ``ATTN=t1`` runs the model's attention
through its tiled forward."""

from __future__ import annotations

from assignment.model.attention_choice import ModelAttention
from assignment.tasks import TaskCode


def model_attention(q, k, v, scale: float):
    """The model's attention through ``IMPL``'s t1_attention.py: the tiled forward, causal, each KV head repeated for
    the query heads that share it (the student's function takes one KV head per query head)."""
    from assignment.impl import load_python
    from assignment.model.attention import repeat_kv_heads

    heads = q.shape[1]
    out, _ = load_python("t1_attention.py").flash_attention_forward(
        q, repeat_kv_heads(k, heads), repeat_kv_heads(v, heads), causal=True, scale=scale
    )
    return out


CODE = TaskCode(
    id="t1",
    model_attention=ModelAttention(
        model_attention,
        label="your Python",
        description="your tiled Python FlashAttention (`t1_attention.py`), KV heads repeated",
    ),
)
