"""Public tests for task t3: the CUDA batched GEMM (``t3_gemm.cu``). Run: ``make test T=t3``."""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import (
    GUARD_HINT,
    SENTINEL,
    assert_close,
    assert_guards_intact,
    assert_repeatable,
    check_todo_regions,
    guarded,
)

pytestmark = pytest.mark.t3
TASK = load_registry().task("t3")
TOL = TASK.tol("float32")
TRANSPOSES = [(False, False), (False, True), (True, False), (True, True)]


def operands(batch, m, n, k, trans_a, trans_b, seed):
    """A and B on the GPU, each between two bands of NaN (``guarded``): a load past an edge reads NaN, so
    the bug shows in C every time instead of depending on what the allocator put next to the tensor."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, *((k, m) if trans_a else (m, k)), generator=gen).cuda()
    b = torch.randn(batch, *((n, k) if trans_b else (k, n)), generator=gen).cuda()
    return guarded(a), guarded(b)


def reference(a, b, trans_a, trans_b, alpha=1.0):
    a, b = a.double(), b.double()
    return alpha * ((a.transpose(-2, -1) if trans_a else a) @ (b.transpose(-2, -1) if trans_b else b))


@pytest.mark.parametrize("trans", TRANSPOSES, ids=lambda t: f"ta{int(t[0])}tb{int(t[1])}")
@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: "b{batch}_{M}x{N}x{K}".format(**s))
def test_gemm_matches_float64(shape, trans, seed):
    a, b = operands(shape["batch"], shape["M"], shape["N"], shape["K"], *trans, seed)
    out = guarded(torch.full((shape["batch"], shape["M"], shape["N"]), SENTINEL, device="cuda"))
    c = kernels.gemm(a, b, trans_a=trans[0], trans_b=trans[1], alpha=0.5, out=out)
    tol = {"atol": TOL["atol"] * shape["K"] ** 0.5, "rtol": TOL["rtol"]}
    assert_close(
        c,
        reference(a, b, *trans, alpha=0.5),
        **tol,
        name=f"C (trans_a={trans[0]}, trans_b={trans[1]})",
        layout="batch, row, col",
        hint=f"{TASK.hint} {GUARD_HINT}",
    )
    assert_guards_intact(c, "C", layout="batch, row, col")


def test_repeatable_bitwise(seed):
    a, b = operands(2, 300, 200, 500, False, False, seed)
    assert_repeatable(
        lambda: kernels.gemm(a, b), 5, "results differ between identical runs: a race (a missing __syncthreads?)"
    )


def test_todo_regions_are_device_code_only():
    check_todo_regions("t3_gemm.cu", ("t3",))
