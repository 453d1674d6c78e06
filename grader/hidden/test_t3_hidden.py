"""Hidden tests for task t3 (CUDA GEMM). Ids carry no shapes; seeds are drawn at grading time."""

from __future__ import annotations

import pytest
import torch

from assignment.cuda import kernels
from assignment.cuda.kernels import Kernels
from assignment.registry import load_registry
from assignment.testing import SENTINEL, assert_close, assert_repeatable, run_timing_rule

pytestmark = pytest.mark.t3
TASK = load_registry().task("t3")
TOL = TASK.tol("float32")
CASES = [pytest.param(s, id=f"case{i}") for i, s in enumerate(TASK.hidden_shapes)]
TRANSPOSES = [pytest.param(t, id=f"ta{int(t[0])}tb{int(t[1])}") for t in
              [(False, False), (False, True), (True, False), (True, True)]]


def operands(batch, m, n, k, trans_a, trans_b, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, *((k, m) if trans_a else (m, k)), generator=gen) * scale
    b = torch.randn(batch, *((n, k) if trans_b else (k, n)), generator=gen)
    return a.cuda(), b.cuda()


def reference(a, b, trans_a, trans_b, alpha=1.0):
    a, b = a.double(), b.double()
    return alpha * ((a.transpose(-2, -1) if trans_a else a) @ (b.transpose(-2, -1) if trans_b else b))


def tolerance(k, scale=1.0):
    return {"atol": TOL["atol"] * scale * max(k, 1) ** 0.5, "rtol": TOL["rtol"]}


@pytest.mark.parametrize("trans", TRANSPOSES)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, trans, seed):
    a, b = operands(shape["batch"], shape["M"], shape["N"], shape["K"], *trans, seed)
    a_before, b_before = a.clone(), b.clone()
    out = torch.full((shape["batch"], shape["M"], shape["N"]), SENTINEL, device="cuda")
    c = kernels.gemm(a, b, trans_a=trans[0], trans_b=trans[1], alpha=1.5, out=out)
    torch.cuda.synchronize()
    assert torch.equal(a, a_before) and torch.equal(b, b_before), "an input was modified"
    assert_close(c, reference(a, b, *trans, alpha=1.5), **tolerance(shape["K"]), name="C")


def test_large_magnitudes_and_broadcast_batch(seed):
    a, b = operands(1, 70, 45, 300, False, True, seed, scale=1e4)
    b = torch.cat([b] * 4)  # a is shared by every batch entry (batch stride 0)
    c = kernels.gemm(a, b, trans_b=True, out=torch.full((4, 70, 45), SENTINEL, device="cuda"))
    assert_close(c, reference(a.expand(4, -1, -1), b, False, True), **tolerance(300, 1e4), name="C, |A|~1e4")


def test_repeatable_bitwise(seed):
    a, b = operands(3, 513, 257, 1031, False, False, seed)
    assert_repeatable(lambda: kernels.gemm(a, b), 5, "results differ between identical runs (a race?)")


@pytest.mark.perf
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, json_metadata):
    s = rule.shape
    reference_kernels = Kernels("solutions")

    def make_inputs(i):
        gen = torch.Generator(device="cuda").manual_seed(i)
        a = torch.randn(s["batch"], s["M"], s["K"], device="cuda", generator=gen)
        b = torch.randn(s["batch"], s["K"], s["N"], device="cuda", generator=gen)
        return a, b

    def check(name, inputs, c):
        a, b = inputs
        assert_close(c[0, :64], (a[0, :64].double() @ b[0].double()), **tolerance(s["K"]), name=f"timed C ({name})")

    flops = 2.0 * s["batch"] * s["M"] * s["N"] * s["K"]
    run_timing_rule(rule, {"student": lambda ab: kernels.gemm(*ab), "reference": lambda ab: reference_kernels.gemm(*ab)},
                    make_inputs, check=check, flops=flops, record=json_metadata)
