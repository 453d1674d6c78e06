"""Public tests for task t9: FlashAttention-3 on Hopper (``t9_flash_attention_hopper.cu``).

Run: ``make test T=t9`` on an H100 or H200 (on any other GPU they are skipped: t9 is not available there). The rule
is t8's: every element of O (fp16/bf16) within twice the largest error PyTorch makes computing the same attention in
the same dtype (plus a small floor), both against float32 arithmetic on the same rounded inputs; the LSE (float32)
against float64. The shapes run the pipeline through its edges: one key tile, several passes over the stages (the
mbarriers' parities flip), lengths off the 128-row tiles.
"""

from __future__ import annotations

import math

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import (
    assert_repeatable,
    check_low_precision_attention,
    check_todo_regions,
    local_memory_of,
    random_qkv,
)

pytestmark = pytest.mark.t9
TASK = load_registry().task("t9")
FILE = "t9_flash_attention_hopper.cu"
SHAPE_ID = "B{B}H{H}Hkv{H_kv}Lq{Lq}Lk{Lk}"
DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]
MASKS = [pytest.param(False, id="full"), pytest.param(True, id="causal")]
GQA_HINT = " K and V have H_kv heads: query head h reads KV head h / (H / H_kv) (bh_kv in the kernel)."
PIPELINE_HINT = (
    " With more key tiles than stages, a stage is refilled: the producer must wait for it to be empty (the parity of "
    "the pass before), and the consumers release it only after wgmma_wait has returned."
)


def check(q, k, v, causal, scale=None, hint="", what="", minus_inf_rows=None):
    check_low_precision_attention(
        kernels.flash_attention_hopper, TASK, q, k, v, causal, scale, hint or TASK.hint, what, minus_inf_rows
    )


def qkv(B, H, Lq, Lk, d, dtype, seed, kv_heads=None, magnitude=1.0):
    tensors = random_qkv(B, H, Lq, Lk, d, seed=seed, device="cuda", kv_heads=kv_heads, magnitude=magnitude)
    return tuple(t.to(dtype) for t in tensors)


@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: SHAPE_ID.format(**s))
def test_matches_float32_within_the_dtypes_own_error(shape, d, dtype, causal, seed):
    q, k, v = qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, dtype, seed, kv_heads=shape["H_kv"])
    hint = TASK.hint + (GQA_HINT if shape["H_kv"] < shape["H"] else "") + (PIPELINE_HINT if shape["Lk"] > 256 else "")
    check(q, k, v, causal, hint=hint, what=f" (d={d}, {'causal' if causal else 'full'})")


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_rows_that_see_no_key(dtype, seed):
    # Lq > Lk with the bottom-right mask: the first Lq - Lk query rows (whole 128-row query tiles among them) see no key.
    q, k, v = qkv(1, 2, 300, 70, 64, dtype, seed)
    hint = "A query tile whose rows see no key loads nothing: its consumers must not wait for Q, and write O = 0 and LSE = -inf."
    check(q, k, v, True, hint=hint, what=" (causal, Lq 300 > Lk 70)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_whose_scores_are_all_minus_inf(dtype, seed):
    q, k, v = qkv(1, 3, 150, 300, 64, dtype, seed, kv_heads=1)
    k[..., 0] = k[..., 0].abs() + 0.5
    rows = torch.zeros(150, dtype=torch.bool, device="cuda")
    rows[3::7], rows[64:128] = True, True  # scattered rows, and a whole warpgroup's 64 rows
    q[:, :, rows, 0] = -math.inf
    hint = "While a row's running max is -inf, subtract 0 inside exp2 (never -inf - (-inf)); l = 0 gives O = 0, LSE = -inf."
    check(q, k, v, False, hint=hint, what=" (rows of -inf scores)", minus_inf_rows=rows)


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_logits_and_a_custom_scale(dtype, seed):
    q, k, v = qkv(1, 2, 90, 400, 128, dtype, seed, magnitude=30.0)
    check(q, k, v, True, scale=0.2, hint="Subtract the running max inside exp2 and fold scale * log2(e) into it.")


def test_query_heads_of_a_group_share_one_kv_head(seed):
    q, k, v = qkv(2, 6, 97, 300, 64, torch.bfloat16, seed, kv_heads=2)
    grouped = kernels.flash_attention_hopper(q, k, v)
    repeated = kernels.flash_attention_hopper(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1))
    for name, a, b in (("O", grouped[0], repeated[0]), ("LSE", grouped[1], repeated[1])):
        assert torch.equal(a, b), (
            f"{name} with 6 query heads over 2 KV heads differs from the KV heads repeated.{GQA_HINT}"
        )


def test_repeatable_bitwise(seed):
    q, k, v = qkv(2, 3, 333, 1100, 128, torch.float16, seed)
    assert_repeatable(
        lambda: kernels.flash_attention_hopper(q, k, v, causal=True),
        10,
        "O or LSE changed between identical runs: a race." + PIPELINE_HINT,
    )


@pytest.mark.cpu
def test_refuses_what_it_is_not_built_for():
    # Argument checks run before any GPU work, so this test runs on any machine.
    q = torch.zeros(1, 1, 8, 64)
    with pytest.raises(TypeError, match=r"q must be torch.float16 or torch.bfloat16"):
        kernels.flash_attention_hopper(q, q, q)
    h = q.half()
    with pytest.raises(TypeError, match=r"one dtype"):
        kernels.flash_attention_hopper(h, h.bfloat16(), h)
    with pytest.raises(ValueError, match=r"head dimension d must be one of \(64, 128\)"):
        h32 = torch.zeros(1, 1, 8, 32, dtype=torch.float16)
        kernels.flash_attention_hopper(h32, h32, h32)


def test_no_fragments_in_local_memory():
    used, limit = local_memory_of(FILE, ("t9",))
    assert used <= limit, (
        f"a kernel uses {used} bytes of local memory per thread (limit {limit}): accumulators indexed with a run-time "
        "index, or too many live registers for the consumers' budget (setmaxnreg), spill; unroll the loops over them"
    )


def test_todo_regions_are_device_code_only():
    check_todo_regions(FILE, ("t9",))
