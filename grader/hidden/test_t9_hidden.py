"""Hidden tests for task t9 (FlashAttention-3 on Hopper, fp16 and bf16, causal or not): t8's checks on t9's kernel,
and the pipeline's own edges (one key tile, passes over the stages, grids of several waves: the registry's shapes).

Inputs live on the host; the kernel gets device copies; expected values are computed after the student's launch
has finished, from the host copies, so no stray device write can reach them. On a GPU that is not a Hopper GPU
the suite is skipped (the grader reports t9 "not available on this GPU").
"""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from grader.hidden import attention_checks as checks
from grader.hidden.common import cases, check_local_memory, check_sanitizer, sanitizer_tools, time_rule

pytestmark = pytest.mark.t9
TASK = load_registry().task("t9")
FILE = "t9_flash_attention_hopper.cu"
CASES = cases(TASK)
DIMS = [pytest.param(d, id=f"dim{i}") for i, d in enumerate((64, 128))]
DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]
MASKS = [pytest.param(False, id="full"), pytest.param(True, id="causal")]
PUBLIC = "make test T=t9"
RACE = (
    "O or LSE changed between identical runs: a race (a stage released before wgmma_wait returned, or refilled early?)"
)


def check_values(shape, d, dtype, causal, seed, magnitude=1.0, scale=None, minus_inf_rows=False):
    checks.check_low_precision_values(
        TASK, kernels.flash_attention_hopper, shape, d, dtype, causal, seed, magnitude, scale, minus_inf_rows
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_matches_float32_within_the_dtypes_own_error)")
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, d, dtype, causal, seed):
    check_values(shape, d, dtype, causal, seed)


@pytest.mark.reproduce(f"{PUBLIC} (test_large_logits_and_a_custom_scale)")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", DIMS)
def test_large_logits_and_custom_scale(d, dtype, seed):
    check_values({"B": 1, "H": 2, "H_kv": 1, "Lq": 130, "Lk": 650}, d, dtype, True, seed, magnitude=30.0, scale=0.2)


@pytest.mark.reproduce(f"{PUBLIC} (test_rows_whose_scores_are_all_minus_inf)")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", DIMS)
def test_rows_whose_scores_are_all_minus_inf(d, dtype, seed):
    for shape in checks.MINUS_INF_SHAPES:
        check_values(shape, d, dtype, False, seed, minus_inf_rows=True)


@pytest.mark.reproduce(f"{PUBLIC} (test_query_heads_of_a_group_share_one_kv_head)")
@pytest.mark.parametrize("causal", MASKS)
def test_query_heads_of_a_group_share_one_kv_head(causal, seed):
    checks.check_group_sharing(causal, seed, d=128, dtype=torch.float16, kernel=kernels.flash_attention_hopper)


@pytest.mark.reproduce(f"{PUBLIC} (test_repeatable_bitwise)")
@pytest.mark.parametrize("dtype", DTYPES)
def test_repeatable_bitwise(dtype, seed):
    checks.check_repeatable(True, seed, dtype=dtype, kernel=kernels.flash_attention_hopper, message=RACE)


@pytest.mark.structure
@pytest.mark.reproduce(f"{PUBLIC} (test_no_fragments_in_local_memory)")
def test_no_fragments_in_local_memory():
    check_local_memory(FILE, ("t9",))


@pytest.mark.deadline(600)
@pytest.mark.reproduce("make sanitize T=t9")
@pytest.mark.parametrize("tool", sanitizer_tools(memcheck_s=2, racecheck_s=3.5))
def test_compute_sanitizer(tool):
    check_sanitizer("t9", tool)


@pytest.mark.perf
@pytest.mark.deadline(300)
@pytest.mark.reproduce("make bench T=t9")
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, check_record):
    time_rule(TASK, rule, check_record, max_reps=60, time_cap_s=40.0)
