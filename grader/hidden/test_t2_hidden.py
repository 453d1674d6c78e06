"""Hidden tests for task t2 (CUDA softmax). Ids carry no shapes; seeds and some shapes are drawn at grading time.

The kernel runs in this process, but only the student's device code is theirs: the grader spliced it
into the kit's host code. Inputs are kept on the host and every expected value is computed after the
student's launch has finished, from those host copies.
"""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.checks import require, same_bits
from assignment.registry import load_registry
from assignment.testing import SENTINEL, assert_close, assert_repeatable
from grader.hidden.common import cases, check_sanitizer, sanitizer_tools, time_rule

pytestmark = pytest.mark.t2
TASK = load_registry().task("t2")
TOL = TASK.tol("float32")
CASES = cases(TASK)
PUBLIC = "make test T=t2"


def rows(shape, seed, scale=1.0, shift=0.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape["rows"], shape["cols"], generator=gen, device="cuda") * scale + shift


def softmax_checked(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the student's softmax of x, the expected one): the expected values are computed after the
    student's launch has finished, from a host copy made before it; x must come back unchanged."""
    x_host = x.cpu()
    y = kernels.softmax(x, out=torch.full_like(x, SENTINEL))
    torch.cuda.synchronize()
    require(same_bits(x, x_host), "inputs_modified", "the input x was modified; write only to y")
    reference = x_host.cuda().double()
    want = torch.softmax(reference, -1)
    want[torch.isneginf(reference).all(-1)] = 0.0  # a row of only -inf gives zeros by convention
    return y, want


@pytest.mark.reproduce(f"{PUBLIC} (test_softmax_matches_float64)")
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, seed):
    assert_close(*softmax_checked(rows(shape, seed)), **TOL, name="softmax")


def masked_rows(shape, seed) -> torch.Tensor:
    """Rows at scale 300 with every fifth entry -inf; then, from the last row up (as many as the shape has): a row of
    only -inf (zeros by convention), a row of -inf but for a few entries near -1000, one of -inf but for one entry.
    In the last two most threads hold only -inf: a maximum taken as 0 for such a thread (instead of only the shift
    inside exp) makes the row's maximum 0, and exp(-1000 - 0) underflows to 0/0."""
    x = rows(shape, seed, scale=300.0)
    x[:, 1::5] = float("-inf")
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    cols = shape["cols"]
    only_inf, few, one = (torch.full((cols,), float("-inf"), device="cuda") for _ in range(3))
    picked = torch.randint(0, cols, (3,), generator=gen, device="cuda")
    few[picked] = torch.randn(3, generator=gen, device="cuda") * 3.0 - 1000.0
    one[picked[:1]] = -1000.0
    for offset, row in enumerate((only_inf, few, one)[: shape["rows"]]):
        x[-1 - offset] = row
    return x


@pytest.mark.reproduce(f"{PUBLIC} (test_minus_inf_entries_and_a_fully_masked_row)")
@pytest.mark.parametrize("shape", CASES)
def test_large_magnitudes_and_minus_inf(shape, seed):
    assert_close(*softmax_checked(masked_rows(shape, seed)), **TOL, name="softmax with -inf", layout="row, col")


@pytest.mark.reproduce(f"{PUBLIC} (test_strongly_negative_rows)")
@pytest.mark.parametrize("shape", CASES)
def test_strongly_negative_rows(shape, seed):
    # Every value is about -1000: exp(x) underflows to 0 unless the row maximum is subtracted.
    assert_close(
        *softmax_checked(rows(shape, seed, scale=3.0, shift=-1000.0)), **TOL, name="softmax of rows near -1000"
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_repeatable_bitwise)")
def test_repeatable_bitwise(seed):
    x = rows({"rows": 37, "cols": 70001}, seed)
    assert_repeatable(lambda: kernels.softmax(x), 5, "results differ between identical runs (a race?)")


@pytest.mark.deadline(300)
@pytest.mark.reproduce("make sanitize T=t2")
@pytest.mark.parametrize("tool", sanitizer_tools(memcheck_s=1, racecheck_s=1.5))
def test_compute_sanitizer(tool):
    check_sanitizer("t2", tool)


@pytest.mark.perf
@pytest.mark.deadline(300)
@pytest.mark.reproduce("make bench T=t2")
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, check_record):
    time_rule(TASK, rule, check_record)
