"""Hidden tests for task t4 (CUDA FlashAttention forward, non-causal)."""

from __future__ import annotations

import pytest

from assignment.registry import load_registry
from grader.hidden import attention_checks as checks
from grader.hidden.common import cases, check_local_memory, check_sanitizer, sanitizer_tools, time_rule

pytestmark = pytest.mark.t4
TASK = load_registry().task("t4")
TOL = TASK.tol("float32")
CASES = cases(TASK)
DIMS = [pytest.param(d, id=f"dim{i}") for i, d in enumerate((32, 64, 128))]
PUBLIC = "make test T=t4"


@pytest.mark.reproduce(f"{PUBLIC} (test_flash_attention_matches_float64)")
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, d, seed):
    checks.check_values(shape, d, False, seed, TOL)


@pytest.mark.reproduce(f"{PUBLIC} (test_large_logits)")
@pytest.mark.parametrize("d", DIMS)
def test_large_logits_and_custom_scale(d, seed):
    checks.check_values(
        {"B": 1, "H": 2, "Lq": 130, "Lk": 250},
        d,
        False,
        seed,
        TASK.tol("large_logits"),
        magnitude=30.0,
        scale=0.2,
        lse_tol=TASK.tol("large_logits_lse"),
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_strongly_negative_scores)")
@pytest.mark.parametrize("d", DIMS)
def test_strongly_negative_scores(d, seed):
    # Every score near -120: a running maximum that starts at 0 gives 0/0.
    checks.check_values({"B": 1, "H": 2, "Lq": 150, "Lk": 200}, d, False, seed, TOL, strongly_negative=True)


@pytest.mark.reproduce(f"{PUBLIC} (test_rows_whose_scores_are_all_minus_inf)")
@pytest.mark.parametrize("d", DIMS)
def test_rows_whose_scores_are_all_minus_inf(d, seed):
    # Without the causal mask only inputs of -inf make such rows: t5's fully masked rows need the same guards.
    for shape in checks.MINUS_INF_SHAPES:
        checks.check_rows_of_minus_inf(shape, d, seed, TOL)


@pytest.mark.reproduce(f"{PUBLIC} (test_query_heads_of_a_group_share_one_kv_head)")
def test_query_heads_of_a_group_share_one_kv_head(seed):
    checks.check_group_sharing(False, seed)


@pytest.mark.reproduce(f"{PUBLIC} (test_repeatable_bitwise)")
def test_repeatable_bitwise(seed):
    checks.check_repeatable(False, seed)


@pytest.mark.structure
@pytest.mark.reproduce(f"{PUBLIC} (test_no_scores_in_local_memory)")
def test_no_scores_in_local_memory():
    check_local_memory("t4_flash_attention.cu", ("t4",))


@pytest.mark.deadline(600)
@pytest.mark.reproduce("make sanitize T=t4")
@pytest.mark.parametrize("tool", sanitizer_tools(memcheck_s=4, racecheck_s=11))
def test_compute_sanitizer(tool):
    check_sanitizer("t4", tool)


@pytest.mark.perf
@pytest.mark.deadline(300)
@pytest.mark.reproduce("make bench T=t4")
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, check_record):
    time_rule(TASK, rule, check_record, max_reps=60, time_cap_s=40.0)
