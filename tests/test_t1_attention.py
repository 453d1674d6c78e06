"""Public tests for task t1: attention in Python (``t1_attention.py``).

Run them with ``make test T=t1``. Each failure says what went wrong, where
(the first bad index in (batch, head, query, dim) order) and gives a hint.
"""

from __future__ import annotations

import pytest
import torch

from assignment.impl import load_python
from assignment.registry import load_registry
from assignment.testing import LargestAllocation, assert_close, max_abs_error, random_qkv, reference_attention

pytestmark = pytest.mark.t1
TASK = load_registry().task("t1")
SHAPES = TASK.public_shapes
LAYOUT = "batch, head, query, dim"
TOL = TASK.tol("float32")


def student():
    return load_python("t1_attention.py")


def shape_id(shape: dict) -> str:
    return "B{B}H{H}Lq{Lq}Lk{Lk}d{d}".format(**shape)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_naive_attention_matches_float64(shape, causal, seed, devices):
    for device in devices:
        q, k, v = random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], shape["d"], seed=seed, device=device)
        out = student().naive_attention(q, k, v, causal=causal)
        expected, _ = reference_attention(q, k, v, causal=causal)
        assert out.dtype == q.dtype, f"naive_attention must return q's dtype {q.dtype}, got {out.dtype}"
        assert_close(out, expected, **TOL, name=f"naive_attention O ({device}, causal={causal})", layout=LAYOUT,
                     hint=TASK.hint)


@pytest.mark.parametrize("blocks", [(64, 64), (16, 32), (7, 5)], ids=lambda b: f"bq{b[0]}bk{b[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_flash_attention_matches_float64(shape, causal, blocks, seed, devices):
    for device in devices:
        q, k, v = random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], shape["d"], seed=seed, device=device)
        out, lse = student().flash_attention_forward(q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1])
        expected, expected_lse = reference_attention(q, k, v, causal=causal)
        assert lse.dtype == torch.float32, f"LSE must be float32, got {lse.dtype}"
        assert_close(out, expected, **TOL, name=f"flash_attention_forward O ({device})", layout=LAYOUT,
                     hint=TASK.hint)
        assert_close(lse, expected_lse, **TOL, name=f"flash_attention_forward LSE ({device})",
                     layout="batch, head, query", hint="LSE_i = m_i + log(l_i) with the final m and l of row i.")


def test_rows_that_see_no_key_give_zeros_and_minus_inf(seed):
    # Lq > Lk with causal masking: the first Lq - Lk query rows see no key at all.
    q, k, v = random_qkv(1, 2, 9, 4, 8, seed=seed)
    out, lse = student().flash_attention_forward(q, k, v, causal=True, block_q=4, block_k=2)
    naive = student().naive_attention(q, k, v, causal=True)
    expected, expected_lse = reference_attention(q, k, v, causal=True)
    hint = "Query i sees keys j <= i + Lk - Lq; rows 0..4 here see none and must be 0 with LSE = -inf (not NaN)."
    assert_close(naive, expected, **TOL, name="naive_attention O", layout=LAYOUT, hint=hint)
    assert_close(out, expected, **TOL, name="flash_attention_forward O", layout=LAYOUT, hint=hint)
    assert_close(lse, expected_lse, **TOL, name="flash_attention_forward LSE", layout="batch, head, query", hint=hint)


def test_large_logits_do_not_overflow(seed):
    # Scores around +-30*sqrt(d): exp() overflows float32 unless the running max is subtracted.
    q, k, v = random_qkv(1, 2, 50, 70, 32, seed=seed, magnitude=30.0)
    out, lse = student().flash_attention_forward(q, k, v, block_q=16, block_k=16)
    expected, expected_lse = reference_attention(q, k, v)
    hint = "Subtract the running max before exp(), and rescale l and the accumulator when it grows."
    assert_close(out, expected, atol=1e-4, rtol=1e-4, name="O with logits x30", layout=LAYOUT, hint=hint)
    assert_close(lse, expected_lse, atol=1e-4, rtol=1e-5, name="LSE with logits x30", layout="batch, head, query",
                 hint=hint)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_low_precision_inputs_accumulate_in_float32(dtype, seed):
    q, k, v = random_qkv(1, 2, 40, 56, 32, seed=seed, dtype=dtype)
    out, lse = student().flash_attention_forward(q, k, v, block_q=16, block_k=16)
    assert out.dtype == dtype, f"O must keep the input dtype {dtype}, got {out.dtype}"
    expected, _ = reference_attention(q, k, v)
    # The same computation done entirely in the low precision by PyTorch:
    scores = (q @ k.transpose(-2, -1)) * (1.0 / 32**0.5)
    baseline = torch.softmax(scores, dim=-1) @ v
    tol = TASK.tol(str(dtype).replace("torch.", ""))
    allowed = tol["max_error_ratio"] * max_abs_error(baseline, expected) + tol["atol_floor"]
    error = max_abs_error(out, expected)
    assert error <= allowed, (
        f"{dtype} error {error:.3g} exceeds {allowed:.3g} ({tol['max_error_ratio']}x a {dtype} PyTorch implementation). "
        "Upcast the tiles to float32 and accumulate m, l and O in float32; cast only the final O."
    )


def test_tiled_version_never_allocates_the_score_matrix(seed):
    q, k, v = random_qkv(1, 1, 256, 256, 16, seed=seed)
    with LargestAllocation() as tracker:
        student().flash_attention_forward(q, k, v, block_q=32, block_k=32)
    limit = 256 * 256 // 4
    assert tracker.largest < limit, (
        f"flash_attention_forward created a tensor of {tracker.largest} elements (shape {tracker.largest_shape}, "
        f"by {tracker.largest_op}); a 256x256 score matrix has {256 * 256}. Work one (block_q x block_k) tile "
        "at a time and never build the full Lq x Lk matrix."
    )
