"""Public tests for task t4: the CUDA FlashAttention forward (``t4_flash_attention.cu``).

Run: ``make test T=t4``.
"""

from __future__ import annotations

import pytest
import torch

from assignment.cuda import kernels
from assignment.registry import load_registry
from assignment.testing import SENTINEL, assert_close, random_qkv, reference_attention

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
