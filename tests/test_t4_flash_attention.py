"""Public tests for task t4: the CUDA FlashAttention forward (``t4_flash_attention.cu``).

Run: ``make test T=t4``.
"""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import (
    SENTINEL,
    assert_close,
    assert_repeatable,
    attention_edge_hint,
    check_todo_regions,
    empty_rows,
    local_memory_of,
    non_finite_where_finite,
    random_qkv,
    reference_attention,
)

pytestmark = pytest.mark.t4
TASK = load_registry().task("t4")
TOL = TASK.tol("float32")
SHAPE_ID = "B{B}H{H}Hkv{H_kv}Lq{Lq}Lk{Lk}"
GQA_HINT = (
    "K and V have H_kv heads: query head h reads KV head h / (H / H_kv), and K/V of batch b start at "
    "head b * H_kv, not b * H."
)


def run_flash(q, k, v, causal=False, scale=None):
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:3], SENTINEL, device=q.device)
    kernels.flash_attention(q, k, v, causal=causal, scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("d", [32, 64, 128])
@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: SHAPE_ID.format(**s))
def test_flash_attention_matches_float64(shape, d, seed):
    # k and v have H_kv heads (grouped-query attention when H_kv < H; see the registry's shapes).
    q, k, v = random_qkv(
        shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed=seed, device="cuda", kv_heads=shape["H_kv"]
    )
    out, lse = run_flash(q, k, v)
    expected, expected_lse = reference_attention(q, k, v)
    hint = TASK.hint + (" " + GQA_HINT if shape["H_kv"] < shape["H"] else "")
    assert_close(
        out,
        expected,
        **TOL,
        name=f"O (d={d}, H={shape['H']}, H_kv={shape['H_kv']})",
        layout="batch, head, query, dim",
        hint=hint,
    )
    assert_close(
        lse,
        expected_lse,
        **TOL,
        name=f"LSE (d={d}, H={shape['H']}, H_kv={shape['H_kv']})",
        layout="batch, head, query",
        hint="LSE = m + log(l) per query row, natural log.",
    )


def test_query_heads_of_a_group_share_one_kv_head(seed):
    # Grouped-query attention reads the shared K/V head directly: the same call on K/V repeated to one head
    # per query head (multi-head layout) must give bitwise the same O and LSE.
    q, k, v = random_qkv(2, 6, 97, 150, 64, seed=seed, device="cuda", kv_heads=2)
    grouped = run_flash(q, k, v)
    repeated = run_flash(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1))
    for name, a, b in (("O", grouped[0], repeated[0]), ("LSE", grouped[1], repeated[1])):
        assert torch.equal(a, b), (
            f"{name} with H = 6 query heads over H_kv = 2 KV heads differs from the same "
            f"attention with the KV heads repeated. {GQA_HINT}"
        )


def hint_for(hint: str, symptom, q, k, v):
    """``hint`` only when the output shows ``symptom()``, the cause it names; never for a kernel that is wrong on
    ordinary inputs of this shape too (``assignment.testing.edge_case_hint``)."""
    return attention_edge_hint(
        hint, symptom, run_flash, q, k, v, tol=TOL, first="test_flash_attention_matches_float64", what="the kernel"
    )


def test_large_logits(seed):
    q, k, v = random_qkv(1, 2, 90, 150, 64, seed=seed, device="cuda", magnitude=30.0)
    out, lse = run_flash(q, k, v)
    expected, expected_lse = reference_attention(q, k, v)
    overflow = "exp() overflowed: subtract the running max inside exp() (scores this large overflow float32)."
    hint = hint_for(
        overflow,
        lambda: non_finite_where_finite(out, expected) or non_finite_where_finite(lse, expected_lse),
        q,
        k,
        v,
    )
    assert_close(
        out, expected, **TASK.tol("large_logits"), name="O with logits x30", layout="batch, head, query, dim", hint=hint
    )
    assert_close(
        lse,
        expected_lse,
        **TASK.tol("large_logits_lse"),
        name="LSE with logits x30",
        layout="batch, head, query",
        hint=hint,
    )


def test_strongly_negative_scores(seed):
    # Every score near -120: exp() underflows to 0 unless the running maximum is subtracted.
    q, k, v = random_qkv(1, 2, 90, 150, 64, seed=seed, device="cuda")
    q, k = q * 0.3 + 3.9, k * 0.3 - 3.9
    out, lse = run_flash(q, k, v)
    expected, expected_lse = reference_attention(q, k, v)
    underflow = (
        "Start the running maximum m at -inf, not 0: with every score near -120, exp2(s - 0) is 0 and l stays 0."
    )
    hint = hint_for(underflow, lambda: non_finite_where_finite(lse, expected_lse) or empty_rows(out, expected), q, k, v)
    assert_close(out, expected, **TOL, name="O, scores near -120", layout="batch, head, query, dim", hint=hint)
    assert_close(lse, expected_lse, **TOL, name="LSE, scores near -120", layout="batch, head, query", hint=hint)


def test_rows_whose_scores_are_all_minus_inf(seed):
    # A -inf in q against keys whose matching component is positive: every score of that row is -inf, as in t5's
    # rows that see no key. Such a row gives O = 0 and LSE = -inf (not NaN); the other rows are ordinary.
    q, k, v = random_qkv(1, 3, 150, 77, 64, seed=seed, device="cuda", kv_heads=1)
    k[..., 0] = k[..., 0].abs() + 0.5
    rows = torch.zeros(150, dtype=torch.bool, device="cuda")
    rows[3::7], rows[64:128] = True, True  # scattered rows, and a whole tile of them
    finite = q.clone()
    q[:, :, rows, 0] = float("-inf")
    out, lse = run_flash(q, k, v)
    expected, expected_lse = reference_attention(finite, k, v)
    expected[:, :, rows], expected_lse[:, :, rows] = 0.0, float("-inf")
    hint = (
        "While a row's running max m is -inf, subtract 0 inside exp2 (never -inf - (-inf)), and write O = 0 and "
        "LSE = -inf for a row whose sum l is 0: the guards of TODOs 4 and 6."
    )
    assert_close(out, expected, **TOL, name="O, rows of -inf scores", layout="batch, head, query, dim", hint=hint)
    assert_close(lse, expected_lse, **TOL, name="LSE, rows of -inf scores", layout="batch, head, query", hint=hint)


def test_repeatable_bitwise(seed):
    q, k, v = random_qkv(2, 3, 333, 517, 64, seed=seed, device="cuda")
    assert_repeatable(
        lambda: kernels.flash_attention(q, k, v),
        10,
        "O or LSE changed between identical runs: a race (a missing __syncthreads?)",
    )


def test_no_scores_in_local_memory():
    used, limit = local_memory_of("t4_flash_attention.cu", ("t4",))
    assert used <= limit, (
        f"a kernel uses {used} bytes of local memory per thread (limit {limit}): keep only a "
        "micro-tile of scores per thread, in registers, never a row of them"
    )


def test_todo_regions_are_device_code_only():
    check_todo_regions("t4_flash_attention.cu", ("t4",))
