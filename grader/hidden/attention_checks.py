"""Checks shared by the hidden t4 and t5 suites (the same kernel, with and without the causal mask).

Inputs live on the host; the kernel gets device copies; expected values are computed after the
student's launch has finished, from the host copies, so no stray device write can reach them.
"""

from __future__ import annotations

import torch

from assignment.checks import require
from assignment.cuda import kernels
from assignment.testing import SENTINEL, assert_close, assert_repeatable, random_qkv, reference_attention

LAYOUT = "batch, head, query, dim"


def run_flash(q_host, k_host, v_host, causal, scale=None):
    """The student's (O, LSE) on the host; the inputs must come back unchanged."""
    q, k, v = (t.cuda() for t in (q_host, k_host, v_host))
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:3], SENTINEL, device=q.device)
    kernels.flash_attention(q, k, v, causal=causal, scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    same = all(torch.equal(d.cpu(), h) for d, h in zip((q, k, v), (q_host, k_host, v_host)))
    require(same, "inputs_modified", "an input (q, k or v) was modified; write only to O and LSE")
    return out.cpu(), lse.cpu()


def expected_on_gpu(q, k, v, causal, scale=None):
    out, lse = reference_attention(q.cuda(), k.cuda(), v.cuda(), causal=causal, scale=scale)
    return out.cpu(), lse.cpu()


def check_values(shape, d, causal, seed, tol, magnitude=1.0, scale=None, strongly_negative=False):
    q, k, v = random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed=seed, magnitude=magnitude)
    if strongly_negative:  # q near +c, k near -c: every score near -120, whose exp underflows to 0
        shift = (120.0 / d ** 0.5) ** 0.5
        q, k = q * 0.3 + shift, k * 0.3 - shift
    out, lse = run_flash(q, k, v, causal, scale)
    expected, expected_lse = expected_on_gpu(q, k, v, causal, scale)
    assert_close(out, expected, **tol, name="O", layout=LAYOUT)
    lse_tol = {"atol": max(tol["atol"], 1e-4 * magnitude), "rtol": tol["rtol"]}
    assert_close(lse, expected_lse, **lse_tol, name="LSE", layout="batch, head, query")


def check_repeatable(causal, seed, repeats=20):
    q, k, v = (t.cuda() for t in random_qkv(2, 3, 333, 517, 64, seed=seed))
    assert_repeatable(lambda: kernels.flash_attention(q, k, v, causal=causal), repeats,
                      "O or LSE changed between identical runs: a race (a missing __syncthreads?)")
