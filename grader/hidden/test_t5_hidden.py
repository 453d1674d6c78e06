"""Hidden tests for task t5 (causal masking in the CUDA FlashAttention kernel)."""

from __future__ import annotations

import pytest
import torch

from assignment.cuda import kernels
from assignment.registry import load_registry
from assignment.testing import random_qkv
from grader.hidden import attention_checks as checks

pytestmark = pytest.mark.t5
TASK = load_registry().task("t5")
TOL = TASK.tol("float32")
CASES = [pytest.param(s, id=f"case{i}") for i, s in enumerate(TASK.hidden_shapes)]
DIMS = [pytest.param(d, id=f"dim{i}") for i, d in enumerate((32, 64, 128))]


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, d, seed):
    checks.check_values(shape, d, True, seed, TOL)


@pytest.mark.parametrize("d", DIMS)
def test_large_logits(d, seed):
    checks.check_values({"B": 1, "H": 2, "Lq": 250, "Lk": 130}, d, True, seed, {"atol": 3e-4, "rtol": 3e-4},
                        magnitude=30.0)


@pytest.mark.parametrize("bh", [pytest.param((1, 2), id="small_grid"), pytest.param((8, 8), id="large_grid")])
def test_future_tiles_are_skipped(bh, seed):
    q, k, v = random_qkv(*bh, 1000, 1000, 64, seed=seed, device="cuda")
    k[:, :, 384:] = float("nan")
    v[:, :, 384:] = float("nan")
    out, _ = kernels.flash_attention(q, k, v, causal=True)
    assert bool(torch.isfinite(out[:, :, :256]).all()), "fully masked key tiles were read: skip them"


def test_repeatable_bitwise(seed):
    checks.check_repeatable(True, seed)


def test_no_score_matrix_allocated(seed):
    checks.check_memory(True, seed)


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer(tool):
    checks.check_sanitizer(tool, causal=True)


@pytest.mark.perf
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, json_metadata):
    checks.time_rule(rule, json_metadata)
