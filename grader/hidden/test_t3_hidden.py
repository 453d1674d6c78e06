"""Hidden tests for task t3 (CUDA GEMM). Ids carry no shapes; seeds and some shapes are drawn at grading time."""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.checks import require, same_bits
from assignment.registry import load_registry
from assignment.testing import GUARD_HINT, SENTINEL, assert_close, assert_guards_intact, assert_repeatable, guarded
from grader.hidden.common import cases, check_sanitizer, sanitizer_tools, time_rule

pytestmark = pytest.mark.t3
TASK = load_registry().task("t3")
TOL = TASK.tol("float32")
CASES = cases(TASK)
PUBLIC = "make test T=t3"
TRANSPOSES = [
    pytest.param(t, id=f"ta{int(t[0])}tb{int(t[1])}")
    for t in [(False, False), (False, True), (True, False), (True, True)]
]


def operands(batch, m, n, k, trans_a, trans_b, seed, scale=1.0):
    """A and B, each between two bands of NaN: a load past an edge reads NaN in every run (never the
    allocator's neighbour: garbage one run, an illegal address the next)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(batch, *((k, m) if trans_a else (m, k)), generator=gen, device="cuda") * scale
    b = torch.randn(batch, *((n, k) if trans_b else (k, n)), generator=gen, device="cuda")
    return guarded(a), guarded(b)


def reference(a, b, trans_a, trans_b, alpha=1.0):
    a, b = a.cuda().double(), b.cuda().double()
    return alpha * ((a.transpose(-2, -1) if trans_a else a) @ (b.transpose(-2, -1) if trans_b else b))


def tolerance(k, scale=1.0):
    return {"atol": TOL["atol"] * scale * max(k, 1) ** 0.5, "rtol": TOL["rtol"]}


def gemm_checked(a, b, out_shape, **kwargs):
    """(C from the student's kernel, the host copies of a and b made before the call); a and b must
    come back unchanged, and nothing may be written around C. Expected values are computed afterwards
    from the host copies."""
    a_host, b_host = a.cpu(), b.cpu()
    c = kernels.gemm(a, b, out=guarded(torch.full(out_shape, SENTINEL, device="cuda")), **kwargs)
    torch.cuda.synchronize()
    require(same_bits(a, a_host) and same_bits(b, b_host), "inputs_modified", "an input was modified; write only to C")
    assert_guards_intact(c, "C", layout="batch, row, col")
    return c, a_host, b_host


@pytest.mark.reproduce(f"{PUBLIC} (test_gemm_matches_float64)")
@pytest.mark.parametrize("trans", TRANSPOSES)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, trans, seed):
    a, b = operands(shape["batch"], shape["M"], shape["N"], shape["K"], *trans, seed)
    c, a, b = gemm_checked(
        a, b, (shape["batch"], shape["M"], shape["N"]), trans_a=trans[0], trans_b=trans[1], alpha=1.5
    )
    assert_close(c, reference(a, b, *trans, alpha=1.5), **tolerance(shape["K"]), name="C", hint=GUARD_HINT)


@pytest.mark.reproduce(f"{PUBLIC} (test_gemm_matches_float64)")
def test_large_magnitudes_and_broadcast_batch(seed):
    a, b = operands(1, 70, 45, 300, False, True, seed, scale=1e4)
    b = guarded(torch.cat([b] * 4))  # a is shared by every batch entry (batch stride 0)
    c, a, b = gemm_checked(a, b, (4, 70, 45), trans_b=True)
    assert_close(
        c, reference(a.expand(4, -1, -1), b, False, True), **tolerance(300, 1e4), name="C, |A|~1e4", hint=GUARD_HINT
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_repeatable_bitwise)")
def test_repeatable_bitwise(seed):
    a, b = operands(3, 513, 257, 1031, False, False, seed)
    assert_repeatable(lambda: kernels.gemm(a, b), 5, "results differ between identical runs (a race?)")


@pytest.mark.deadline(300)
@pytest.mark.reproduce("make sanitize T=t3")
@pytest.mark.parametrize("tool", sanitizer_tools(memcheck_s=2, racecheck_s=4.5))
def test_compute_sanitizer(tool):
    check_sanitizer("t3", tool)


@pytest.mark.perf
@pytest.mark.deadline(300)
@pytest.mark.reproduce("make bench T=t3")
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, check_record):
    time_rule(TASK, rule, check_record)
