"""Public tests for task t4: the CUDA FlashAttention forward (``t4_flash_attention.cu``).

Run: ``make test T=t4``.
"""

from __future__ import annotations

import pytest
import torch

from assignment.cuda import kernels
from assignment.registry import load_registry
from assignment.testing import (
    SENTINEL,
    assert_close,
    assert_repeatable,
    check_todo_regions,
    local_memory_of,
    random_qkv,
    reference_attention,
)

pytestmark = pytest.mark.t4
TASK = load_registry().task("t4")
TOL = TASK.tol("float32")


def run_flash(q, k, v, causal=False, scale=None):
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:3], SENTINEL, device=q.device)
    kernels.flash_attention(q, k, v, causal=causal, scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("d", [32, 64, 128])
@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: "B{B}H{H}Lq{Lq}Lk{Lk}".format(**s))
def test_flash_attention_matches_float64(shape, d, seed):
    q, k, v = random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed=seed, device="cuda")
    out, lse = run_flash(q, k, v)
    expected, expected_lse = reference_attention(q, k, v)
    assert_close(out, expected, **TOL, name=f"O (d={d})", layout="batch, head, query, dim", hint=TASK.hint)
    assert_close(lse, expected_lse, **TOL, name=f"LSE (d={d})", layout="batch, head, query",
                 hint="LSE = m + log(l) per query row, natural log.")


def test_large_logits(seed):
    q, k, v = random_qkv(1, 2, 90, 150, 64, seed=seed, device="cuda", magnitude=30.0)
    out, lse = run_flash(q, k, v)
    expected, expected_lse = reference_attention(q, k, v)
    hint = "Subtract the running max inside exp() and rescale the accumulator when it grows."
    assert_close(out, expected, atol=2e-4, rtol=2e-4, name="O with logits x30", layout="batch, head, query, dim",
                 hint=hint)
    assert_close(lse, expected_lse, atol=2e-3, rtol=2e-5, name="LSE with logits x30", layout="batch, head, query",
                 hint=hint)


def test_strongly_negative_scores(seed):
    # Every score near -120: exp() underflows to 0 unless the running maximum is subtracted.
    q, k, v = random_qkv(1, 2, 90, 150, 64, seed=seed, device="cuda")
    q, k = q * 0.3 + 3.9, k * 0.3 - 3.9
    out, lse = run_flash(q, k, v)
    expected, expected_lse = reference_attention(q, k, v)
    hint = "Start the running maximum m at -inf, not 0: with every score near -120, exp2(s - 0) is 0 and l stays 0."
    assert_close(out, expected, **TOL, name="O, scores near -120", layout="batch, head, query, dim", hint=hint)
    assert_close(lse, expected_lse, **TOL, name="LSE, scores near -120", layout="batch, head, query", hint=hint)


def test_repeatable_bitwise(seed):
    q, k, v = random_qkv(2, 3, 333, 517, 64, seed=seed, device="cuda")
    assert_repeatable(lambda: kernels.flash_attention(q, k, v), 10,
                      "O or LSE changed between identical runs: a race (a missing __syncthreads?)")


def test_no_scores_in_local_memory():
    used, limit = local_memory_of("t4_flash_attention.cu", ("t4",))
    assert used <= limit, (f"a kernel uses {used} bytes of local memory per thread (limit {limit}): keep only a "
                           "micro-tile of scores per thread, in registers, never a row of them")


def test_todo_regions_are_device_code_only():
    check_todo_regions("t4_flash_attention.cu", ("t4",))
