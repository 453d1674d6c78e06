"""Public tests for task t1: attention in Python (``t1_attention.py``).

Run them with ``make test T=t1``. Each failure says what went wrong, where
(the first bad index in (batch, head, query, dim) order) and gives a hint.
"""

from __future__ import annotations

import math

import pytest
import torch

from assignment.impl import load_python
from assignment.policy import Rules, check_file, describe
from assignment.registry import load_registry
from assignment.checks import CheckFailure
from assignment.testing import (
    LargestAllocation,
    assert_close,
    attention_edge_hint,
    empty_rows,
    mean_abs_error,
    non_finite_where_finite,
    random_qkv,
    reference_attention,
    require_python_implemented,
)

pytestmark = pytest.mark.t1
TASK = load_registry().task("t1")
SHAPES = TASK.public_shapes
LAYOUT = "batch, head, query, dim"
TOL = TASK.tol("float32")


def student():
    return load_python("t1_attention.py")


def shape_id(shape: dict) -> str:
    return "B{B}H{H}Lq{Lq}Lk{Lk}d{d}".format(**shape)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_naive_attention_matches_float64(shape, causal, seed, devices):
    for device in devices:
        q, k, v = random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], shape["d"], seed=seed, device=device)
        out = student().naive_attention(q, k, v, causal=causal)
        expected, _ = reference_attention(q, k, v, causal=causal)
        assert out.dtype == q.dtype, f"naive_attention must return q's dtype {q.dtype}, got {out.dtype}"
        assert_close(
            out, expected, **TOL, name=f"naive_attention O ({device}, causal={causal})", layout=LAYOUT, hint=TASK.hint
        )


@pytest.mark.parametrize("blocks", [(64, 64), (16, 32), (7, 5)], ids=lambda b: f"bq{b[0]}bk{b[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_flash_attention_matches_float64(shape, causal, blocks, seed, devices):
    for device in devices:
        q, k, v = random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], shape["d"], seed=seed, device=device)
        out, lse = student().flash_attention_forward(q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1])
        expected, expected_lse = reference_attention(q, k, v, causal=causal)
        assert lse.dtype == torch.float32, f"LSE must be float32, got {lse.dtype}"
        assert_close(out, expected, **TOL, name=f"flash_attention_forward O ({device})", layout=LAYOUT, hint=TASK.hint)
        assert_close(
            lse,
            expected_lse,
            **TOL,
            name=f"flash_attention_forward LSE ({device})",
            layout="batch, head, query",
            hint="LSE_i = m_i + log(l_i) with the final m and l of row i.",
        )


def hint_for(name: str, hint: str, symptom, q, k, v, otherwise: str = "", **kwargs):
    """The hint of an edge-case check of ``name``: ``hint`` only where the output shows ``symptom()``, the cause it
    names, and never for code that is wrong on ordinary float32 inputs of this shape too
    (``assignment.testing.edge_case_hint``)."""
    return attention_edge_hint(
        hint,
        symptom,
        lambda *qkv: getattr(student(), name)(*(t.float() for t in qkv), **kwargs),
        q,
        k,
        v,
        tol=TOL,
        first=f"test_{'naive_attention' if name == 'naive_attention' else 'flash_attention'}_matches_float64",
        causal=kwargs.get("causal", False),
        scale=kwargs.get("scale"),
        what=name,
        otherwise=otherwise,
    )


def test_rows_that_see_no_key_give_zeros_and_minus_inf(seed):
    # Lq > Lk with causal masking: the first Lq - Lk query rows see no key at all.
    q, k, v = random_qkv(1, 2, 9, 4, 8, seed=seed)
    out, lse = student().flash_attention_forward(q, k, v, causal=True, block_q=4, block_k=2)
    naive = student().naive_attention(q, k, v, causal=True)
    expected, expected_lse = reference_attention(q, k, v, causal=True)
    rule = "Query i sees keys j <= i + Lk - Lq; rows 0..4 here see none and must be 0 with LSE = -inf (not NaN)."

    def blind_rows_wrong(*outputs):  # the symptom: the rows that see no key are where it goes wrong
        return lambda: any(
            bool(torch.isnan(x[:, :, :5]).any()) or bool((x[:, :, :5] != (0 if x.dim() == 4 else -math.inf)).any())
            for x in outputs
        )

    seeing = q[:, :, :4]  # ordinary inputs for this test: as many queries as keys, every row sees one
    blocks = {"block_q": 4, "block_k": 2}
    for name, result, symptom, kwargs in (
        ("naive_attention", naive, blind_rows_wrong(naive), {}),
        ("flash_attention_forward", out, blind_rows_wrong(out, lse), blocks),
    ):
        hint = hint_for(name, rule, symptom, seeing, k, v, causal=True, **kwargs)
        assert_close(result, expected, **TOL, name=f"{name} O", layout=LAYOUT, hint=hint)
    hint = hint_for("flash_attention_forward", rule, blind_rows_wrong(out, lse), seeing, k, v, causal=True, **blocks)
    assert_close(lse, expected_lse, **TOL, name="flash_attention_forward LSE", layout="batch, head, query", hint=hint)


@pytest.mark.parametrize("scale", [None, 0.3], ids=["default_scale", "scale0.3"])
def test_large_logits_do_not_overflow(scale, seed):
    # Scores around +-30*sqrt(d): exp() overflows float32 unless the running max is subtracted.
    q, k, v = random_qkv(1, 2, 50, 70, 32, seed=seed, magnitude=30.0)
    out, lse = student().flash_attention_forward(q, k, v, scale=scale, block_q=16, block_k=16)
    expected, expected_lse = reference_attention(q, k, v, scale=scale)
    overflow = "exp() overflowed: subtract the running max before exp() (scores this large overflow float32)."
    unsure = "The scores here are large: print m, l and the LSE of one row next to the float64 reference's."
    hint = hint_for(
        "flash_attention_forward",
        overflow,
        lambda: non_finite_where_finite(out, expected) or non_finite_where_finite(lse, expected_lse),
        q,
        k,
        v,
        unsure,
        scale=scale,
        block_q=16,
        block_k=16,
    )
    assert_close(out, expected, **TASK.tol("large_logits"), name="O with logits x30", layout=LAYOUT, hint=hint)
    assert_close(
        lse,
        expected_lse,
        **TASK.tol("large_logits_lse"),
        name="LSE with logits x30",
        layout="batch, head, query",
        hint=hint,
    )
    naive = student().naive_attention(q, k, v, scale=scale)
    overflow = "exp() overflowed: subtract the row max before exp() (scores this large overflow float32)."
    hint = hint_for(
        "naive_attention", overflow, lambda: non_finite_where_finite(naive, expected), q, k, v, unsure, scale=scale
    )
    assert_close(naive, expected, **TASK.tol("large_logits"), name="naive O with logits x30", layout=LAYOUT, hint=hint)


def test_strongly_negative_scores(seed):
    # Every score is about -200: exp(score) underflows to 0 unless the row maximum is subtracted.
    q, k, v = random_qkv(1, 2, 40, 56, 64, seed=seed)
    q, k = q * 0.3 + 5.0, k * 0.3 - 5.0
    expected, expected_lse = reference_attention(q, k, v)
    out, lse = student().flash_attention_forward(q, k, v, block_q=16, block_k=16)
    unsure = "Every score here is near -200: print m, l and the LSE of one row next to the float64 reference's."
    hint = hint_for(
        "flash_attention_forward",
        "Start the running maximum at -inf, not 0: with every score near -200, exp(s - 0) is 0 and l stays 0.",
        lambda: non_finite_where_finite(lse, expected_lse) or empty_rows(out, expected),
        q,
        k,
        v,
        unsure,
        block_q=16,
        block_k=16,
    )
    assert_close(out, expected, **TASK.tol("negative_scores"), name="O, scores near -200", layout=LAYOUT, hint=hint)
    assert_close(
        lse,
        expected_lse,
        **TASK.tol("negative_scores_lse"),
        name="LSE, scores near -200",
        layout="batch, head, query",
        hint=hint,
    )
    naive = student().naive_attention(q, k, v)
    hint = hint_for(
        "naive_attention",
        "Subtract the row max before exp(): with every score near -200, exp(s) is 0 and the row sum stays 0.",
        lambda: empty_rows(naive, expected),
        q,
        k,
        v,
        unsure,
    )
    assert_close(
        naive, expected, **TASK.tol("negative_scores"), name="naive O, scores near -200", layout=LAYOUT, hint=hint
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_low_precision_inputs_accumulate_in_float32(dtype, seed):
    q, k, v = random_qkv(1, 2, 40, 56, 32, seed=seed, dtype=dtype)
    expected, _ = reference_attention(q, k, v)
    bound = TASK.tol(str(dtype).replace("torch.", ""))["max_mean_error_ratio"]
    # The least error any implementation that returns this dtype can make: the exact answer, rounded.
    rounding = mean_abs_error(expected.to(dtype), expected)
    blocks = {"block_q": 16, "block_k": 16}
    for name, out, kwargs in (
        ("flash_attention_forward", student().flash_attention_forward(q, k, v, **blocks)[0], blocks),
        ("naive_attention", student().naive_attention(q, k, v), {}),
    ):
        assert out.dtype == dtype, f"{name}: O must keep the input dtype {dtype}, got {out.dtype}"
        ratio = mean_abs_error(out, expected) / rounding
        if ratio <= bound:
            continue
        # A precision problem: the hint says so only when the same code is right on float32 inputs.
        upcast = "Upcast the tiles to float32 and keep the scores, P, m, l and O in float32; cast only the final O."
        hint = hint_for(name, upcast, lambda: True, q, k, v, **kwargs)
        raise CheckFailure(
            "mismatch",
            f"{name}: {dtype} mean error is {ratio:.2f}x that of the exact answer rounded to {dtype} (allowed "
            f"{bound}x). {hint()}",
        )


def test_causal_skips_key_blocks_it_cannot_see(seed):
    # Causal self-attention: queries 0..15 see keys 0..15 only. Later key/value blocks hold NaN; reading
    # them, even to mask them, leaks NaN into O through P @ V.
    q, k, v = random_qkv(1, 1, 64, 64, 16, seed=seed)
    expected, _ = reference_attention(q[:, :, :16], k[:, :, :16], v[:, :, :16], causal=True)
    k[:, :, 16:] = float("nan")
    v[:, :, 16:] = float("nan")
    out, _ = student().flash_attention_forward(q, k, v, causal=True, block_q=16, block_k=16)
    assert bool(torch.isfinite(out[:, :, :16]).all()), (
        "the first query block read key blocks it cannot see: stop the key loop at the last visible key "
        "instead of masking the blocks after it"
    )
    assert_close(out[:, :, :16], expected, **TOL, name="O of the first query block", layout=LAYOUT)


def test_file_uses_only_allowed_operations():
    # The grader checks the file before running it; a file that breaks a rule is not run at all.
    path = require_python_implemented("t1_attention.py", "t1")  # the stub counts, never a TODO comment left behind
    rules = Rules("t1", TASK.rules.imports, TASK.rules.forbidden)
    found = check_file(path, rules)
    assert not found, "t1_attention.py breaks the task's rules:\n" + describe(found, path.name)


def test_tiled_version_never_allocates_the_score_matrix(seed):
    q, k, v = random_qkv(1, 1, 256, 256, 16, seed=seed)
    with LargestAllocation() as tracker:
        student().flash_attention_forward(q, k, v, block_q=32, block_k=32)
    limit = 256 * 256 // 4
    assert tracker.largest < limit, (
        f"flash_attention_forward created a tensor of {tracker.largest} elements (shape {tracker.largest_shape}, "
        f"by {tracker.largest_op}); a 256x256 score matrix has {256 * 256}. Work one (block_q x block_k) tile "
        "at a time and never build the full Lq x Lk matrix."
    )
