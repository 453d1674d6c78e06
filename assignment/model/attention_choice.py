"""What the model takes as its attention: the kit's own by name, or a task's code as a ``ModelAttention``.

Apart from the seam (attention.py) so that it loads without torch: the task modules declare their
``ModelAttention`` here, and a tool that only reads what the tasks declare (the handout) needs no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KIT_IMPLEMENTATIONS = ("reference", "sdpa")  # the kit's own, by name; a task's comes as its ModelAttention


@dataclass(frozen=True)
class ModelAttention:
    """A task's code as the model's attention: what ``ATTN=<id>`` (``make generate``, ``load_checkpoint(...,
    attention=)``) hands the model, declared in the task's ``TaskCode.model_attention``.

    ``attend(q, k, v, scale) -> out`` is causal attention, bottom-right aligned (query i of Lq sees key j of Lk when
    j <= i + Lk - Lq): q (B, H, Lq, d); k, v (B, H_kv, Lk, d) with H % H_kv == 0; out (B, H, Lq, d) in q's dtype. It
    runs ``IMPL``'s code and imports it when called. Before a model runs it, the seam checks the model against
    ``cuda``, ``head_dims`` and ``dtypes`` and refuses what the code cannot take with a message that says why."""

    attend: Callable[[Any, Any, Any, float], Any]
    label: str  # a few words for --help and messages: "your CUDA kernel"
    description: str  # the handout's row (Markdown): what runs and how it reads the K/V heads
    cuda: bool = False  # runs on a CUDA device only
    head_dims: tuple[int, ...] | None = None  # the head dimensions it takes (None: any)
    dtypes: tuple[str, ...] | None = None  # the model dtypes it takes, as torch names them ("bfloat16"; None: any)
    # (impl) -> the KV-cache class of implementation ``impl`` (None: IMPL's) that does the attention itself once the
    # model has caches (Attention.forward calls its attend); ``attend`` then serves only the passes without a cache
    cache_class: Callable[[str | None], type] | None = None
    name: str = ""  # its ATTN= name, the task's id (TaskCode sets it)


# What the model takes as its attention: "reference", "sdpa", or a task's ModelAttention.
Choice = str | ModelAttention


def task_attention(choice: Choice) -> ModelAttention | None:
    """The task's ``ModelAttention`` that ``choice`` is, None for the kit's own; ValueError for anything else (a task's
    id included: the model does not look task code up, its callers hand it over)."""
    if isinstance(choice, ModelAttention):
        return choice
    if isinstance(choice, str) and choice in KIT_IMPLEMENTATIONS:
        return None
    raise ValueError(
        f"attention {choice!r} is not one the model knows: it takes {' or '.join(map(repr, KIT_IMPLEMENTATIONS))}, "
        f"or a task's code as the ModelAttention its task declares (assignment.tasks.attention('t5'), as "
        f"make generate ATTN=t5 does)"
    )


def name_of(choice: Choice) -> str:
    """What ``ATTN=`` calls ``choice``: the kit's name, or the task's id."""
    spec = task_attention(choice)
    return choice if spec is None else (spec.name or spec.label)
