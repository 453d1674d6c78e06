"""Hidden tests for task t1 (instructor-only; never shipped).

The student's file runs only in the sandboxed worker (``grader.isolation``): every call sends plain
tensors there and gets plain tensors back; this process compares them. Seeds and part of the shapes
are drawn at grading time; test ids carry no shapes.

**Tiling** is what makes ``flash_attention_forward`` FlashAttention, so it is checked where it shows: on
long inputs (``TILING_CASES``: 256K keys, 256K queries, and 8K x 8K causal, whose boolean mask alone is
twice the memory bound), through the worker's peak resident memory read from outside it (the kernel's
counter, which the student's code cannot switch off) and, where the worker reports it, its largest
intermediate. A "tiled" function that builds any Lq x Lk tensor there (scores, a mask, probabilities, a
call of the naive version) fails the structure check of that case, and its value checks (``test_flash``)
earn nothing either: they count only for a function shown tiled on every long case, with correct outputs
there (a function that fails or returns something else on long inputs is not shown tiled).
"""

from __future__ import annotations

import pytest
import torch

from assignment.checks import CheckFailure, require
from assignment.registry import load_registry
from assignment.testing import assert_close, mean_abs_error, random_qkv, reference_attention
from grader.hidden.common import cases
from grader.isolation.client import WorkerFailure, student_module

pytestmark = pytest.mark.t1
TASK = load_registry().task("t1")
TOL = TASK.tol("float32")
LAYOUT = "batch, head, query, dim"
CASES = cases(TASK)
PUBLIC = "make test T=t1"
# The memory bound a tiled implementation stays under, measured from outside the worker: the inputs
# and outputs crossing the channel (two copies each) plus this much working memory. Measured on the
# reference (after a small warm-up call): 8 MB; a row or a column of scores on these shapes (64 x 256K
# floats, with its exponentials) needs 190-200 MB, the 8K x 8K causal case's boolean mask 64 MB, its
# scores 256 MB.
MEMORY_SLACK_BYTES = 32 * 2**20
LONG = 2**18
CAUSAL_LONG = 2**13
# name -> (Lq, Lk, causal, block_q, block_k): a tile is at most 1024 x 64 or 512 x 512 scores (64K, 256K floats).
TILING_CASES = {
    "long_keys": (64, LONG, False, 64, 1024),
    "long_queries": (LONG, 64, False, 1024, 64),
    "long_causal": (CAUSAL_LONG, CAUSAL_LONG, True, 512, 512),
}
REFERENCE_ROWS = 1024  # the long causal case's float64 reference, this many query rows at a time
# How a long case's call may fail and leave flash's tiling unshown: an error it raised, a result that is no tensor.
SHOWS_NOTHING = ("exception", "result")


def student(gpu: bool = True):
    return student_module("t1_attention.py", gpu=gpu, forbidden=TASK.rules.forbidden)


@pytest.fixture(scope="module", autouse=True)
def _workers_started_side_by_side():
    for gpu in (True, False):
        student(gpu=gpu).worker.prestart()


def qkv(shape, seed, device, **kwargs):
    return random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], shape["d"], seed=seed, device=device, **kwargs)


def check_output(out, q, name):
    require(
        isinstance(out, torch.Tensor) and out.shape == q.shape and out.dtype == q.dtype,
        "shape",
        f"{name}: O must have q's shape {tuple(q.shape)} and dtype {q.dtype}, got "
        f"{getattr(out, 'shape', type(out).__name__)} {getattr(out, 'dtype', '')}",
        f"{name}: wrong shape or dtype",
    )


# --------------------------------------------------------------------------- tiling, on long inputs

_tiling: dict[tuple[str, int], str | tuple[BaseException, object]] = {}
# What each long case measured, against its bounds (the structure check's JSON metadata: the open level's calibration
# reads it, python -m grader.tools.open_levels --calibrate).
_measured: dict[tuple[str, int], dict] = {}


def tiling_problem(case: str, seed: int) -> str:
    """'' when flash_attention_forward stayed within its tiles on the long ``case``, else what it built. Each case
    runs once per grading: its structure check and the value checks' gate share the answer. What ended the call
    itself (a wrong output there, a NotImplementedError, a crash) is raised again wherever it is asked for."""
    if (case, seed) not in _tiling:
        try:
            _tiling[case, seed] = _measure_tiling(case, seed)
        except Exception as exc:  # noqa: BLE001 - kept, and raised again by every check that asks
            _tiling[case, seed] = exc, exc.__traceback__
    found = _tiling[case, seed]
    if isinstance(found, tuple):
        error, traceback = found
        raise error.with_traceback(traceback)  # from where it came, not from every check that raised it before
    return found


def _measure_tiling(case: str, seed: int) -> str:
    lq, lk, causal, block_q, block_k = TILING_CASES[case]
    q, k, v = random_qkv(1, 1, lq, lk, 4, seed=seed)
    blocks = {"causal": causal, "block_q": block_q, "block_k": block_k}
    worker = student(gpu=False)
    # A small call of the same function first pays for the libraries' one-time set-up.
    worker.call(
        "flash_attention_forward", *random_qkv(1, 1, min(lq, 512), min(lk, 512), 4, seed=seed), track=True, **blocks
    )
    result = worker.call("flash_attention_forward", q, k, v, track=True, measure_memory=True, **blocks)
    out, lse = result.value
    check_output(out, q, "flash O")
    expected, expected_lse = long_reference(q, k, v, causal)
    assert_close(out, expected, **TOL, name="flash O", layout=LAYOUT)
    assert_close(lse, expected_lse, **TOL, name="flash LSE", layout="batch, head, query")
    tile = block_q * block_k
    largest = (result.largest or {}).get("numel", 0)
    moved = 2 * sum(t.numel() * t.element_size() for t in (q, k, v)) + 2 * (out.numel() * 4 + lse.numel() * 4)
    _measured[case, seed] = {
        "largest_numel": largest,
        "largest_bound": 4 * tile + lq * 4,
        "beyond_io_mb": None if result.peak_bytes is None else round((result.peak_bytes - moved) / 2**20, 1),
        "beyond_io_bound_mb": MEMORY_SLACK_BYTES / 2**20,
        "seconds": round(result.seconds, 2),
    }
    if largest > 4 * tile + lq * 4:
        return (
            f"its largest intermediate has {largest} elements (shape {result.largest.get('shape')}) where a "
            f"tile has {tile}: a row, a column or all of the Lq x Lk scores, mask or probabilities"
        )
    if result.peak_bytes is not None and result.peak_bytes > moved + MEMORY_SLACK_BYTES:
        return (
            f"the call's peak memory was {result.peak_bytes / 2**20:.0f} MB, its inputs and outputs' "
            f"{moved / 2**20:.0f} MB and {(result.peak_bytes - moved) / 2**20:.0f} MB more (limit "
            f"{MEMORY_SLACK_BYTES / 2**20:.0f} MB more): it holds far more than a tile, such as the Lq x Lk scores, "
            "mask or probabilities, or every query block's output until the end"
        )
    return ""


def long_reference(q, k, v, causal):
    """The float64 reference; on the long causal case a block of query rows at a time (its whole matrix would take
    gigabytes): rows [r0, r1) against keys [0, r1) are the same bottom-right causal attention."""
    if not causal:
        return reference_attention(q, k, v)
    parts = [
        reference_attention(
            q[:, :, r0 : r0 + REFERENCE_ROWS],
            k[:, :, : r0 + REFERENCE_ROWS],
            v[:, :, : r0 + REFERENCE_ROWS],
            causal=True,
        )
        for r0 in range(0, q.shape[2], REFERENCE_ROWS)
    ]
    return torch.cat([o for o, _ in parts], dim=2), torch.cat([lse for _, lse in parts], dim=2)


def require_tiled(seed: int) -> None:
    """The gate on flash's value checks: they count only for a function shown tiled on every long case."""
    for case in TILING_CASES:
        try:
            problem = tiling_problem(case, seed)
        except CheckFailure as exc:
            problem = f"its output there is wrong ({exc.summary})"
        except WorkerFailure as exc:
            if exc.kind not in SHOWS_NOTHING:
                raise  # not written yet, forbidden, a crash or a hang: said as itself
            problem = "it failed there (its structure check says how)"
        require(
            not problem,
            "structure",
            f"flash_attention_forward is not shown tiled on long inputs ({case}): {problem}; its value checks "
            "count only for a tiled version",
            "the tiled version is not tiled on long inputs, so its value checks do not count",
        )


@pytest.mark.cost(9)
# First in the file, so that each long case runs in a check of its own (and its deadline), before the value checks
# that read its answer.
@pytest.mark.structure
@pytest.mark.reproduce(f"{PUBLIC} (test_tiled_version_never_allocates_the_score_matrix)")
@pytest.mark.parametrize("case", list(TILING_CASES))
def test_no_score_matrix_allocated(case, seed, check_record):
    # One block of queries over 256K keys, the other way round, and 8K x 8K causal: a tile is at most 1024 x 64 or
    # 512 x 512 scores, where a row or a column of the score matrix is 256K scores and the causal mask 64M booleans.
    problem = tiling_problem(case, seed)
    if (case, seed) in _measured:
        check_record["measured"] = _measured[case, seed]
    require(
        not problem,
        "structure",
        f"the tiled version must not build an Lq x Lk tensor: {problem}",
        "an intermediate far larger than one tile of scores",
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_naive_attention_matches_float64)")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", CASES)
def test_naive(shape, causal, seed, devices):
    for device in devices:
        q, k, v = qkv(shape, seed, device)
        expected, _ = reference_attention(q, k, v, causal=causal)
        out = student().naive_attention(q, k, v, causal=causal)
        check_output(out, q, "naive O")
        assert_close(out, expected, **TOL, name="naive O", layout=LAYOUT)


@pytest.mark.reproduce(
    f"{PUBLIC} (test_flash_attention_matches_float64, test_tiled_version_never_allocates_the_score_matrix)"
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", CASES)
def test_flash(shape, causal, seed, devices):
    require_tiled(seed)
    for device in devices:
        q, k, v = qkv(shape, seed, device)
        expected, expected_lse = reference_attention(q, k, v, causal=causal)
        for block_q, block_k in ((64, 64), (17, 33), (128, 16)):
            out, lse = student().flash_attention_forward(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
            check_output(out, q, "flash O")
            assert_close(out, expected, **TOL, name="flash O", layout=LAYOUT)
            assert_close(lse, expected_lse, **TOL, name="flash LSE", layout="batch, head, query")


@pytest.mark.reproduce(f"{PUBLIC} (test_large_logits_do_not_overflow)")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_custom_scale_and_large_logits(causal, seed, devices):
    for device in devices:
        q, k, v = random_qkv(2, 2, 97, 131, 64, seed=seed, device=device, magnitude=30.0)
        expected, expected_lse = reference_attention(q, k, v, causal=causal, scale=0.3)
        out, lse = student().flash_attention_forward(q, k, v, causal=causal, scale=0.3, block_q=32, block_k=32)
        assert_close(out, expected, **TASK.tol("large_logits"), name="flash O, logits x30", layout=LAYOUT)
        assert_close(
            lse, expected_lse, **TASK.tol("large_logits_lse"), name="flash LSE, logits x30", layout="batch, head, query"
        )
        naive = student().naive_attention(q, k, v, causal=causal, scale=0.3)
        assert_close(naive, expected, **TASK.tol("large_logits"), name="naive O, logits x30", layout=LAYOUT)


@pytest.mark.reproduce(f"{PUBLIC} (test_strongly_negative_scores)")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_strongly_negative_scores(causal, seed, devices):
    # Every score is about -200: exp(score) underflows to 0 unless the row maximum is subtracted
    # (a running maximum that starts at 0 instead of -inf gives 0/0 here).
    for device in devices:
        q, k, v = random_qkv(1, 2, 70, 90, 64, seed=seed, device=device)
        q, k = q * 0.3 + 5.0, k * 0.3 - 5.0
        expected, expected_lse = reference_attention(q, k, v, causal=causal)
        out, lse = student().flash_attention_forward(q, k, v, causal=causal, block_q=32, block_k=32)
        assert_close(out, expected, **TASK.tol("negative_scores"), name="flash O, scores near -200", layout=LAYOUT)
        assert_close(
            lse,
            expected_lse,
            **TASK.tol("negative_scores_lse"),
            name="flash LSE, scores near -200",
            layout="batch, head, query",
        )
        naive = student().naive_attention(q, k, v, causal=causal)
        assert_close(naive, expected, **TASK.tol("negative_scores"), name="naive O, scores near -200", layout=LAYOUT)


@pytest.mark.reproduce(f"{PUBLIC} (test_rows_that_see_no_key_give_zeros_and_minus_inf)")
@pytest.mark.parametrize("lengths", [(33, 5), (130, 1), (2, 1)], ids=["case0", "case1", "case2"])
def test_fully_masked_rows(lengths, seed, devices):
    lq, lk = lengths
    for device in devices:
        q, k, v = random_qkv(2, 1, lq, lk, 32, seed=seed, device=device)
        expected, expected_lse = reference_attention(q, k, v, causal=True)
        out, lse = student().flash_attention_forward(q, k, v, causal=True, block_q=16, block_k=4)
        assert_close(out, expected, **TOL, name="flash O (masked rows)", layout=LAYOUT)
        assert_close(lse, expected_lse, **TOL, name="flash LSE (masked rows)", layout="batch, head, query")
        naive = student().naive_attention(q, k, v, causal=True)
        assert_close(naive, expected, **TOL, name="naive O (masked rows)", layout=LAYOUT)


@pytest.mark.reproduce(f"{PUBLIC} (test_low_precision_inputs_accumulate_in_float32)")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_low_precision(dtype, causal, seed, devices):
    bound = TASK.tol(str(dtype).replace("torch.", ""))["max_mean_error_ratio"]
    for device in devices:
        q, k, v = random_qkv(2, 2, 113, 203, 64, seed=seed, device=device, dtype=dtype)
        reference, _ = reference_attention(q, k, v, causal=causal)
        rounding = mean_abs_error(reference.to(dtype), reference)
        for name, out in (
            ("flash", student().flash_attention_forward(q, k, v, causal=causal, block_q=32, block_k=64)[0]),
            ("naive", student().naive_attention(q, k, v, causal=causal)),
        ):
            check_output(out, q, f"{name} O")
            ratio = mean_abs_error(out, reference) / rounding
            require(
                ratio <= bound,
                "mismatch",
                f"{name}: mean error {ratio:.2f}x that of the exact answer rounded to {dtype} (allowed {bound}x): "
                "accumulate in float32",
                f"{name} O in {dtype}: mean error {ratio:.2f}x the rounding error of the "
                f"exact answer (allowed {bound}x): accumulate in float32",
            )


@pytest.mark.structure
@pytest.mark.reproduce(f"{PUBLIC} (test_causal_skips_key_blocks_it_cannot_see)")
def test_causal_skips_key_blocks(seed):
    # Causal self-attention (Lq = Lk): queries 0..63 see keys 0..63 only. The later key/value blocks
    # hold NaN; reading them (even to mask them) leaks NaN into O through P @ V.
    q, k, v = random_qkv(1, 1, 256, 256, 16, seed=seed)
    expected, _ = reference_attention(q[:, :, :64], k[:, :, :64], v[:, :, :64], causal=True)
    k[:, :, 64:] = float("nan")
    v[:, :, 64:] = float("nan")
    out, _ = student(gpu=False).flash_attention_forward(q, k, v, causal=True, block_q=64, block_k=64)
    require(
        bool(torch.isfinite(out[:, :, :64]).all()),
        "structure",
        "the first query block read key blocks it cannot see: skip fully masked key blocks instead of masking them",
        "fully masked key blocks were read instead of skipped",
    )
    assert_close(out[:, :, :64], expected, **TOL, name="flash O, first query block", layout=LAYOUT)
