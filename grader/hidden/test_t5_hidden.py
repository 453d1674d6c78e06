"""Hidden tests for task t5 (causal masking in the CUDA FlashAttention kernel).

The grader builds t5 with the student's t5 regions and the kit's t4 regions, so t5 is graded on its
own: a student who has not finished t4 can still earn t5.
"""

from __future__ import annotations

import pytest
import torch

from assignment.checks import require
from assignment.registry import load_registry
from assignment.testing import assert_close
from grader.hidden import attention_checks as checks
from grader.hidden.common import cases, check_local_memory, check_sanitizer, sanitizer_tools, time_rule

pytestmark = pytest.mark.t5
TASK = load_registry().task("t5")
TOL = TASK.tol("float32")
CASES = cases(TASK)
DIMS = [pytest.param(d, id=f"dim{i}") for i, d in enumerate((32, 64, 128))]
PUBLIC = "make test T=t5"


@pytest.mark.reproduce(f"{PUBLIC} (test_causal_matches_float64)")
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, d, seed):
    checks.check_values(shape, d, True, seed, TOL)


@pytest.mark.reproduce(f"{PUBLIC} (test_causal_matches_float64)")
@pytest.mark.parametrize("d", DIMS)
def test_large_logits(d, seed):
    checks.check_values(
        {"B": 1, "H": 2, "Lq": 250, "Lk": 130},
        d,
        True,
        seed,
        TASK.tol("large_logits"),
        magnitude=30.0,
        lse_tol=TASK.tol("large_logits_lse"),
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_every_offset_of_the_last_key_tile)")
@pytest.mark.parametrize(
    "grid, d",
    [
        pytest.param("small", 32, id="small-dim0"),
        pytest.param("small", 64, id="small-dim1"),
        pytest.param("small", 128, id="small-dim2"),
        pytest.param("large", 64, id="large-dim1"),
    ],
)
def test_every_offset_of_the_last_key_tile(grid, d, seed):
    # The last key a query tile sees at every offset of its key tile (attention_checks.KEY_TILE): a loop bound that
    # stops one tile short at one offset loses keys at that offset only.
    for shape in checks.boundary_shapes(checks.BOUNDARY_GRIDS[grid]):
        checks.check_values(shape, d, True, seed, TOL)


@pytest.mark.reproduce(f"{PUBLIC} (test_strongly_negative_scores)")
@pytest.mark.parametrize("d", DIMS)
def test_strongly_negative_scores(d, seed):
    checks.check_values({"B": 1, "H": 2, "Lq": 200, "Lk": 150}, d, True, seed, TOL, strongly_negative=True)


@pytest.mark.structure
@pytest.mark.reproduce(f"{PUBLIC} (test_keys_a_query_cannot_see_are_never_read)")
@pytest.mark.parametrize("bh", [pytest.param((1, 2), id="small_grid"), pytest.param((8, 8), id="large_grid")])
def test_future_tiles_are_skipped(bh, seed):
    q, k, v = checks.qkv_on_gpu(*bh, 1000, 1000, 64, seed)
    k[:, :, 384:] = float("nan")
    v[:, :, 384:] = float("nan")
    out, _, (q, k, v) = checks.run_flash(q, k, v, True)
    expected, _ = checks.expected_on_gpu(q[:, :, :256], k[:, :, :256], v[:, :, :256], True)
    require(
        bool(torch.isfinite(out[:, :, :256]).all()),
        "structure",
        "fully masked key tiles were read: skip them",
        "key tiles that no query of a tile can see were read instead of skipped",
    )
    assert_close(out[:, :, :256], expected, **TOL, name="O of the first 256 queries", layout=checks.LAYOUT)


@pytest.mark.reproduce(f"{PUBLIC} (test_repeatable_bitwise)")
def test_repeatable_bitwise(seed):
    checks.check_repeatable(True, seed)


@pytest.mark.structure
@pytest.mark.reproduce("make test T=t4 (test_no_scores_in_local_memory)")
def test_no_scores_in_local_memory():
    check_local_memory("t4_flash_attention.cu", ("t4", "t5"))


@pytest.mark.deadline(600)
@pytest.mark.reproduce("make sanitize T=t5")
@pytest.mark.parametrize("tool", sanitizer_tools(memcheck_s=4, racecheck_s=11))
def test_compute_sanitizer(tool):
    check_sanitizer("t5", tool)


@pytest.mark.perf
@pytest.mark.deadline(300)
@pytest.mark.reproduce("make bench T=t5")
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, check_record):
    time_rule(TASK, rule, check_record, max_reps=60, time_cap_s=40.0)
