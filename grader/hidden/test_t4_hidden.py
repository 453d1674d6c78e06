"""Hidden tests for task t4 (CUDA FlashAttention forward, non-causal)."""

from __future__ import annotations

import pytest

from assignment.registry import load_registry
from grader.hidden import attention_checks as checks

pytestmark = pytest.mark.t4
TASK = load_registry().task("t4")
TOL = TASK.tol("float32")
CASES = [pytest.param(s, id=f"case{i}") for i, s in enumerate(TASK.hidden_shapes)]
DIMS = [pytest.param(d, id=f"dim{i}") for i, d in enumerate((32, 64, 128))]


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, d, seed):
    checks.check_values(shape, d, False, seed, TOL)


@pytest.mark.parametrize("d", DIMS)
def test_large_logits_and_custom_scale(d, seed):
    checks.check_values({"B": 1, "H": 2, "Lq": 130, "Lk": 250}, d, False, seed, {"atol": 3e-4, "rtol": 3e-4},
                        magnitude=30.0, scale=0.2)


def test_repeatable_bitwise(seed):
    checks.check_repeatable(False, seed)


def test_no_score_matrix_allocated(seed):
    checks.check_memory(False, seed)


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer(tool):
    checks.check_sanitizer(tool, causal=False)


@pytest.mark.perf
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, json_metadata):
    checks.time_rule(rule, json_metadata)
