"""Public tests for task t2: the CUDA row softmax (``t2_softmax.cu``). Run: ``make test T=t2``."""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import (
    SENTINEL,
    assert_close,
    assert_repeatable,
    check_todo_regions,
    edge_case_hint,
    empty_rows,
    non_finite_where_finite,
    passes,
)

pytestmark = pytest.mark.t2
TASK = load_registry().task("t2")
TOL = TASK.tol("float32")


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def random_rows(rows: int, cols: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=gen) * scale).cuda()


def run(x: torch.Tensor) -> torch.Tensor:
    out = torch.full_like(x, SENTINEL)
    before = x.clone()
    y = kernels.softmax(x, out=out)
    torch.cuda.synchronize()
    assert torch.equal(x, before), "t2_softmax_forward modified its input x; write only to y"
    return y


def hint_for(hint: str, symptom, x: torch.Tensor):
    """``hint`` only when the output shows ``symptom()``, the cause it names; never for a kernel that is wrong on
    ordinary rows of this shape too (``assignment.testing.edge_case_hint``)."""
    ordinary = random_rows(*x.shape, seed=7)
    return edge_case_hint(
        hint,
        symptom=symptom,
        right_on_ordinary_inputs=lambda: passes(
            lambda: assert_close(run(ordinary), reference(ordinary), **TOL, name="")
        ),
        what="the kernel",
        first="test_softmax_matches_float64",
    )


@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: f"{s['rows']}x{s['cols']}")
def test_softmax_matches_float64(shape, seed):
    x = random_rows(shape["rows"], shape["cols"], seed)
    assert_close(run(x), reference(x), **TOL, name="softmax", layout="row, col", hint=TASK.hint)


def test_large_magnitudes_do_not_overflow(seed):
    x = random_rows(6, 3000, seed, scale=1000.0)
    y, expected = run(x), reference(x)
    overflow = "exp(1000) overflows float32: subtract the row max first."
    hint = hint_for(overflow, lambda: non_finite_where_finite(y, expected), x)
    assert_close(y, expected, **TOL, name="softmax of x*1000", layout="row, col", hint=hint)


def test_minus_inf_entries_and_a_fully_masked_row(seed):
    x = random_rows(6, 1500, seed)
    x[0, ::3] = float("-inf")
    x[2] = float("-inf")
    # Rows of -inf but for a few values near -1000 (rows 3 and 4): most threads hold only -inf there. Such a thread's
    # maximum is -inf (only the shift inside exp becomes 0): reported as 0, it becomes the row's maximum, and
    # exp(-1000 - 0) underflows to 0/0.
    x[3:5] = float("-inf")
    x[3, [5, 700, 1499]] = torch.tensor([-1000.0, -1003.0, -998.5], device="cuda")
    x[4, 1001] = -1000.0
    expected = reference(x)
    expected[2] = 0.0  # a row of only -inf gives zeros by convention (not NaN)
    y = run(x)
    masked = (
        "When the row max is -inf, use 0 as the shift and write zeros, never NaN; a thread (or slice) whose values "
        "are all -inf keeps -inf as its maximum, so that it never raises the row's."
    )
    hint = hint_for(masked, lambda: bool(torch.isnan(y).any()) or bool((y[2] != 0).any()) or empty_rows(y, expected), x)
    assert_close(y, expected, **TOL, name="softmax with -inf", layout="row, col", hint=hint)


def test_strongly_negative_rows(seed):
    # Every value is about -1000: exp(x) underflows to 0 unless the row maximum is subtracted first.
    x = random_rows(5, 3000, seed) * 3.0 - 1000.0
    y, expected = run(x), reference(x)
    underflow = "Start the running maximum at -inf, not 0: exp(-1000 - 0) is 0 and the sum stays 0."
    hint = hint_for(underflow, lambda: empty_rows(y, expected), x)
    assert_close(y, expected, **TOL, name="softmax of rows near -1000", layout="row, col", hint=hint)


def test_repeatable_bitwise(seed):
    x = random_rows(37, 20001, seed)
    assert_repeatable(
        lambda: kernels.softmax(x), 5, "results differ between identical runs: a race (a missing __syncthreads?)"
    )


def test_todo_regions_are_device_code_only():
    check_todo_regions("t2_softmax.cu", ("t2",))
