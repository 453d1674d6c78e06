"""Hidden tests for task t1 (instructor-only; never shipped).

Seeds are drawn at grading time. Test ids carry no shapes, so a student's
report shows which check failed but not its inputs.
"""

from __future__ import annotations

import pytest
import torch

from assignment.impl import load_python
from assignment.registry import load_registry
from assignment.testing import LargestAllocation, assert_close, max_abs_error, random_qkv, reference_attention

pytestmark = pytest.mark.t1
TASK = load_registry().task("t1")
SHAPES = TASK.hidden_shapes
TOL = TASK.tol("float32")
LAYOUT = "batch, head, query, dim"
CASES = [pytest.param(shape, id=f"case{i}") for i, shape in enumerate(SHAPES)]


def student():
    return load_python("t1_attention.py")


def qkv(shape, seed, device, **kwargs):
    return random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], shape["d"], seed=seed, device=device, **kwargs)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", CASES)
def test_naive(shape, causal, seed, devices):
    for device in devices:
        q, k, v = qkv(shape, seed, device)
        expected, _ = reference_attention(q, k, v, causal=causal)
        assert_close(student().naive_attention(q, k, v, causal=causal), expected, **TOL, name="naive O",
                     layout=LAYOUT)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", CASES)
def test_flash(shape, causal, seed, devices):
    for device in devices:
        q, k, v = qkv(shape, seed, device)
        expected, expected_lse = reference_attention(q, k, v, causal=causal)
        for block_q, block_k in ((64, 64), (17, 33), (128, 16)):
            out, lse = student().flash_attention_forward(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
            assert out.shape == q.shape and out.dtype == q.dtype, "O must have q's shape and dtype"
            assert_close(out, expected, **TOL, name="flash O", layout=LAYOUT)
            assert_close(lse, expected_lse, **TOL, name="flash LSE", layout="batch, head, query")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_custom_scale_and_large_logits(causal, seed, devices):
    for device in devices:
        q, k, v = random_qkv(2, 2, 97, 131, 64, seed=seed, device=device, magnitude=30.0)
        expected, expected_lse = reference_attention(q, k, v, causal=causal, scale=0.3)
        out, lse = student().flash_attention_forward(q, k, v, causal=causal, scale=0.3, block_q=32, block_k=32)
        assert bool(torch.isfinite(out).all()), "O has NaN or inf with large logits"
        assert_close(out, expected, atol=2e-4, rtol=2e-4, name="flash O, logits x30", layout=LAYOUT)
        assert_close(lse, expected_lse, atol=2e-3, rtol=2e-5, name="flash LSE, logits x30", layout="batch, head, query")
        naive = student().naive_attention(q, k, v, causal=causal, scale=0.3)
        assert_close(naive, expected, atol=2e-4, rtol=2e-4, name="naive O, logits x30", layout=LAYOUT)


@pytest.mark.parametrize("lengths", [(33, 5), (130, 1), (2, 1)], ids=["case0", "case1", "case2"])
def test_fully_masked_rows(lengths, seed, devices):
    lq, lk = lengths
    for device in devices:
        q, k, v = random_qkv(2, 1, lq, lk, 32, seed=seed, device=device)
        expected, expected_lse = reference_attention(q, k, v, causal=True)
        out, lse = student().flash_attention_forward(q, k, v, causal=True, block_q=16, block_k=4)
        assert_close(out, expected, **TOL, name="flash O (masked rows)", layout=LAYOUT)
        assert_close(lse, expected_lse, **TOL, name="flash LSE (masked rows)", layout="batch, head, query")
        naive = student().naive_attention(q, k, v, causal=True)
        assert_close(naive, expected, **TOL, name="naive O (masked rows)", layout=LAYOUT)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_low_precision(dtype, causal, seed, devices):
    tol = TASK.tol(str(dtype).replace("torch.", ""))
    for device in devices:
        q, k, v = random_qkv(2, 2, 113, 203, 64, seed=seed, device=device, dtype=dtype)
        reference, _ = reference_attention(q.float(), k.float(), v.float(), causal=causal)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / 8.0)
        if causal:
            i = torch.arange(113, device=device)[:, None]
            j = torch.arange(203, device=device)[None, :]
            scores = scores.masked_fill(j > i + 90, float("-inf"))
        baseline = torch.softmax(scores, dim=-1) @ v
        allowed = tol["max_error_ratio"] * max_abs_error(baseline, reference) + tol["atol_floor"]
        for name, out in (
            ("flash", student().flash_attention_forward(q, k, v, causal=causal, block_q=32, block_k=64)[0]),
            ("naive", student().naive_attention(q, k, v, causal=causal)),
        ):
            assert out.dtype == dtype, f"{name}: O must keep the input dtype"
            assert bool(torch.isfinite(out).all()), f"{name}: NaN or inf in a {dtype} output"
            error = max_abs_error(out, reference)
            assert error <= allowed, f"{name}: {dtype} error {error:.3g} > allowed {allowed:.3g}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_no_score_matrix_allocated(causal, seed):
    lq, lk = 384, 320
    q, k, v = random_qkv(1, 2, lq, lk, 16, seed=seed)
    with LargestAllocation() as tracker:
        student().flash_attention_forward(q, k, v, causal=causal, block_q=64, block_k=64)
    assert tracker.largest <= 2 * 64 * 64 * 2 or tracker.largest <= 2 * lq * 16, (
        f"largest intermediate has {tracker.largest} elements (shape {tracker.largest_shape}); "
        "the tiled version must not build an Lq x Lk matrix"
    )


def test_causal_skips_key_blocks(seed):
    # Causal self-attention (Lq = Lk): queries 0..63 see keys 0..63 only. The
    # later key/value blocks hold NaN; reading them (even to mask them) leaks
    # NaN into O through P @ V.
    q, k, v = random_qkv(1, 1, 256, 256, 16, seed=seed)
    k[:, :, 64:] = float("nan")
    v[:, :, 64:] = float("nan")
    out, _ = student().flash_attention_forward(q, k, v, causal=True, block_q=64, block_k=64)
    assert bool(torch.isfinite(out[:, :, :64]).all()), (
        "the first query block read key blocks it cannot see: skip fully masked key blocks instead of masking them"
    )
