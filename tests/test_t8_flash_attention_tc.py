"""Public tests for task t8: FlashAttention on tensor cores (``t8_flash_attention_tc.cu``).

Run: ``make test T=t8``. O (fp16/bf16) is held to the FlashAttention repository's rule: every element within
twice the largest error PyTorch makes computing the same attention in the same dtype (plus a small floor), both
against float32 arithmetic on the same rounded inputs. The LSE (float32) is checked against float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import (
    SENTINEL,
    assert_repeatable,
    check_low_precision_attention,
    check_todo_regions,
    edge_case_hint,
    local_memory_of,
    non_finite_where_finite,
    ordinary_like,
    passes,
    random_qkv,
    reference_attention,
)

pytestmark = pytest.mark.t8
TASK = load_registry().task("t8")
FILE = "t8_flash_attention_tc.cu"
SHAPE_ID = "B{B}H{H}Hkv{H_kv}Lq{Lq}Lk{Lk}"
DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]
MASKS = [pytest.param(False, id="full"), pytest.param(True, id="causal")]
GQA_HINT = (
    "K and V have H_kv heads: query head h reads KV head h / (H / H_kv), and K/V of batch b start at "
    "head b * H_kv, not b * H."
)


def run_flash(q, k, v, causal=False, scale=None):
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:3], SENTINEL, device=q.device)
    kernels.flash_attention_tc(q, k, v, causal=causal, scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    return out, lse


def check(q, k, v, causal, scale=None, hint="", what="", minus_inf_rows=None):
    """The kernel's O and LSE against float32 arithmetic (float64, in fact) on the same fp16/bf16 inputs.
    ``minus_inf_rows``: query rows with -inf in dimension 0 (every score -inf), expected to give O = 0, LSE = -inf."""
    check_low_precision_attention(
        kernels.flash_attention_tc, TASK, q, k, v, causal, scale, hint or TASK.hint, what, minus_inf_rows
    )


@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: SHAPE_ID.format(**s))
def test_matches_float32_within_the_dtypes_own_error(shape, d, dtype, causal, seed):
    q, k, v = random_qkv(
        shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed=seed, device="cuda", kv_heads=shape["H_kv"]
    )
    q, k, v = (t.to(dtype) for t in (q, k, v))
    hint = TASK.hint + (" " + GQA_HINT if shape["H_kv"] < shape["H"] else "")
    check(q, k, v, causal, hint=hint, what=f" (d={d}, {'causal' if causal else 'full'})")


def hint_for(hint: str, symptom, q, k, v, causal: bool):
    """``hint`` only when the output shows ``symptom(O, LSE)``, the cause it names; never for a kernel that fails the
    same check on ordinary inputs of this shape (``assignment.testing.edge_case_hint``)."""
    ordinary = ordinary_like(q, k, v)
    return edge_case_hint(
        hint,
        symptom=lambda: symptom(*run_flash(q, k, v, causal)),
        right_on_ordinary_inputs=lambda: passes(lambda: check(*ordinary, causal, what=" (ordinary inputs)")),
        what="the kernel",
        first="test_matches_float32_within_the_dtypes_own_error",
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_rows_that_see_no_key(dtype, seed):
    # Lq > Lk with the bottom-right mask: the first Lq - Lk query rows see no key at all (O = 0, LSE = -inf).
    q, k, v = (t.to(dtype) for t in random_qkv(1, 2, 150, 70, 64, seed=seed, device="cuda"))
    blind = 150 - 70
    hint = hint_for(
        "A row that sees no key has l = 0: write O = 0 and LSE = -inf for it, never 0/0 or exp2 of -inf - -inf.",
        lambda out, lse: bool((out[:, :, :blind] != 0).any()) or bool((lse[:, :, :blind] != -math.inf).any()),
        q,
        k,
        v,
        causal=True,
    )
    check(q, k, v, True, hint=hint, what=" (causal, Lq 150 > Lk 70)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_whose_scores_are_all_minus_inf(dtype, seed):
    # A -inf in q against keys whose matching component is positive: every score of that row is -inf, without any
    # mask. Such a row gives O = 0 and LSE = -inf (not NaN), like a causal row that sees no key.
    q, k, v = (t.to(dtype) for t in random_qkv(1, 3, 150, 77, 64, seed=seed, device="cuda", kv_heads=1))
    k[..., 0] = k[..., 0].abs() + 0.5
    rows = torch.zeros(150, dtype=torch.bool, device="cuda")
    rows[3::7], rows[64:128] = True, True  # scattered rows, and whole tiles of them
    q[:, :, rows, 0] = -math.inf
    hint = (
        "While a row's running max is -inf, subtract 0 inside exp2 (never -inf - (-inf)), and write O = 0 and "
        "LSE = -inf for a row whose sum l is 0."
    )
    check(q, k, v, False, hint=hint, what=" (rows of -inf scores)", minus_inf_rows=rows)


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_logits(dtype, seed):
    q, k, v = (t.to(dtype) for t in random_qkv(1, 2, 90, 150, 64, seed=seed, device="cuda", magnitude=30.0))
    expected, expected_lse = reference_attention(q, k, v)
    hint = hint_for(
        "exp2 overflowed: subtract the running max inside exp2 (scores this large overflow float32).",
        lambda out, lse: non_finite_where_finite(out, expected) or non_finite_where_finite(lse, expected_lse),
        q,
        k,
        v,
        causal=False,
    )
    check(q, k, v, False, hint=hint, what=" with logits x30")


def test_custom_scale(seed):
    q, k, v = (t.to(torch.float16) for t in random_qkv(2, 2, 100, 120, 128, seed=seed, device="cuda"))
    check(q, k, v, True, scale=0.3, hint="Fold the given scale (times log2(e)) into the exponent.", what=" scale 0.3")


def test_query_heads_of_a_group_share_one_kv_head(seed):
    q, k, v = (t.to(torch.bfloat16) for t in random_qkv(2, 6, 97, 150, 64, seed=seed, device="cuda", kv_heads=2))
    grouped = run_flash(q, k, v)
    repeated = run_flash(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1))
    for name, a, b in (("O", grouped[0], repeated[0]), ("LSE", grouped[1], repeated[1])):
        assert torch.equal(a, b), (
            f"{name} with H = 6 query heads over H_kv = 2 KV heads differs from the same "
            f"attention with the KV heads repeated. {GQA_HINT}"
        )


def test_repeatable_bitwise(seed):
    q, k, v = (t.to(torch.float16) for t in random_qkv(2, 3, 333, 517, 128, seed=seed, device="cuda"))
    assert_repeatable(
        lambda: kernels.flash_attention_tc(q, k, v, causal=True),
        10,
        "O or LSE changed between identical runs: a race (a missing __syncthreads or cp.async wait?)",
    )


@pytest.mark.cpu
def test_refuses_what_it_is_not_built_for():
    # Argument checks run before any GPU work, so this test runs on any machine.
    q = torch.zeros(1, 1, 8, 64)
    with pytest.raises(TypeError, match=r"q must be torch.float16 or torch.bfloat16"):
        kernels.flash_attention_tc(q, q, q)
    h = q.half()
    with pytest.raises(TypeError, match=r"one dtype"):
        kernels.flash_attention_tc(h, h.bfloat16(), h)
    with pytest.raises(ValueError, match=r"head dimension d must be one of \(64, 128\)"):
        h32 = torch.zeros(1, 1, 8, 32, dtype=torch.float16)
        kernels.flash_attention_tc(h32, h32, h32)


def test_no_fragments_in_local_memory():
    used, limit = local_memory_of(FILE, ("t8",))
    assert used <= limit, (
        f"a kernel uses {used} bytes of local memory per thread (limit {limit}): fragments indexed with a "
        "run-time index, or too many live registers, spill to local memory; unroll the loops over fragments"
    )


def test_todo_regions_are_device_code_only():
    check_todo_regions(FILE, ("t8",))
