"""Hidden tests for task t2 (CUDA softmax). Ids carry no shapes; seeds are drawn at grading time."""

from __future__ import annotations

import pytest
import torch

from assignment.cuda import kernels
from assignment.cuda.kernels import Kernels
from assignment.registry import load_registry
from assignment.testing import SENTINEL, assert_close, assert_repeatable, run_timing_rule

pytestmark = pytest.mark.t2
TASK = load_registry().task("t2")
TOL = TASK.tol("float32")
CASES = [pytest.param(s, id=f"case{i}") for i, s in enumerate(TASK.hidden_shapes)]


def rows(shape, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape["rows"], shape["cols"], generator=gen) * scale).cuda()


def checked_softmax(x):
    before = x.clone()
    y = kernels.softmax(x, out=torch.full_like(x, SENTINEL))
    torch.cuda.synchronize()
    assert torch.equal(x, before), "the input was modified"
    return y


@pytest.mark.parametrize("shape", CASES)
def test_values(shape, seed):
    x = rows(shape, seed)
    assert_close(checked_softmax(x), torch.softmax(x.double(), -1), **TOL, name="softmax")


@pytest.mark.parametrize("shape", CASES)
def test_large_magnitudes_and_minus_inf(shape, seed):
    x = rows(shape, seed, scale=300.0)
    x[:, 1::5] = float("-inf")
    x[-1] = float("-inf")
    expected = torch.softmax(x.double(), -1)
    expected[-1] = 0.0
    assert_close(checked_softmax(x), expected, **TOL, name="softmax with -inf")


def test_repeatable_bitwise(seed):
    x = rows({"rows": 37, "cols": 70001}, seed)
    assert_repeatable(lambda: checked_softmax(x), 5, "results differ between identical runs (a race?)")


@pytest.mark.perf
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, json_metadata):
    shape = rule.shape
    reference = Kernels("solutions")

    def make_inputs(i):
        gen = torch.Generator(device="cuda").manual_seed(i)
        return torch.randn(shape["rows"], shape["cols"], device="cuda", generator=gen)

    def check(name, x, y):
        assert_close(y[:64], torch.softmax(x[:64].double(), -1), **TOL, name=f"timed softmax ({name})")

    nbytes = 2 * 4 * shape["rows"] * shape["cols"]
    run_timing_rule(rule, {"student": kernels.softmax, "reference": reference.softmax}, make_inputs, check=check,
                    bytes_moved=nbytes, record=json_metadata)
