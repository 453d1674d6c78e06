"""The public t1 tests can fail: each planted bug is caught by the test meant for it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
SOLUTION = (REPO / "solutions" / "t1_attention.py").read_text()

BUGS = {
    # name: (text in the solution, replacement, the public test that must fail)
    "no max subtraction": (
        "shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))",
        "shift = torch.zeros_like(m_new)",
        "test_large_logits_do_not_overflow",
    ),
    "materialises the score matrix": (
        '    neg_inf = float("-inf")\n    for q0 in range(0, lq, block_q):',
        '    neg_inf = float("-inf")\n    _ = q.float() @ k.float().transpose(-2, -1)\n    for q0 in range(0, lq, block_q):',
        "test_tiled_version_never_allocates_the_score_matrix",
    ),
    "NaN in fully masked rows": (
        "out[:, :, q0:q1] = torch.where(seen[..., None], acc / safe_l[..., None], torch.zeros_like(acc)).to(q.dtype)",
        "out[:, :, q0:q1] = (acc / l[..., None]).to(q.dtype)",
        "test_rows_that_see_no_key_give_zeros_and_minus_inf",
    ),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_public_t1_test_catches(bug, tmp_path):
    old, new, test_name = BUGS[bug]
    assert old in SOLUTION, f"test setup: the solution changed, update the planted bug {bug!r}"
    (tmp_path / "t1_attention.py").write_text(SOLUTION.replace(old, new))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPO / "tests" / "test_t1_attention.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            test_name,
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(REPO),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "IMPL": str(tmp_path)},
    )
    assert proc.returncode == 1, f"{test_name} did not catch '{bug}':\n{proc.stdout[-1500:]}"
    assert "failed" in proc.stdout


# --------------------------------------------------------------------------- the hints name the right cause

MAX_AT_MINUS_INF = "Start the running maximum at -inf"
UPCAST = "Upcast the tiles to float32"
OVERFLOW = "subtract the running max"
NO_KEY_ROWS = "rows 0..4 here see none"
ORDINARY = "also wrong on ordinary inputs"
HINT_BUGS = {
    # name: ([(text in the solution, replacement)], test selection, hints that must appear, hints that must not)
    "no accumulator rescale": (
        [("acc = correction[..., None] * acc + p @", "acc = acc + p @")],
        "strongly_negative or low_precision or large_logits or see_no_key",
        [ORDINARY],
        [MAX_AT_MINUS_INF, UPCAST, OVERFLOW, NO_KEY_ROWS],
    ),
    "running max starts at 0": (
        [
            (
                "m = torch.full((batch, heads, q1 - q0), neg_inf, dtype=torch.float32, device=q.device)",
                "m = torch.zeros((batch, heads, q1 - q0), dtype=torch.float32, device=q.device)",
            )
        ],
        "strongly_negative or low_precision or large_logits or see_no_key",
        [MAX_AT_MINUS_INF],
        [ORDINARY, UPCAST, OVERFLOW, NO_KEY_ROWS],
    ),
    "accumulates in fp16": (
        [
            (
                "acc = torch.zeros(batch, heads, q1 - q0, d, dtype=torch.float32, device=q.device)",
                "acc = torch.zeros(batch, heads, q1 - q0, d, dtype=q.dtype, device=q.device)",
            ),
            (
                "acc = correction[..., None] * acc + p @ v[:, :, k0:k1].float()",
                "acc = (correction[..., None] * acc + p @ v[:, :, k0:k1].float()).to(acc.dtype)",
            ),
        ],
        "strongly_negative or low_precision or large_logits or see_no_key",
        [UPCAST],
        [ORDINARY, MAX_AT_MINUS_INF, OVERFLOW, NO_KEY_ROWS],
    ),
    "no max subtraction": (  # exact arithmetic without the running max: right until exp() overflows
        [
            (
                "shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))",
                "shift = torch.zeros_like(m)",
            ),
            ("correction = torch.exp(m - shift)", "correction = torch.ones_like(m)"),
            (
                "row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))",
                "row_max = torch.zeros_like(row_max)",
            ),
        ],
        "large_logits",
        [OVERFLOW],
        [ORDINARY, UPCAST, MAX_AT_MINUS_INF],
    ),
}


@pytest.mark.parametrize("bug", list(HINT_BUGS))
def test_each_hint_fires_only_on_the_symptom_it_names(bug, tmp_path):
    """A planted bug's failures carry the hint for that bug, and no hint that blames something the code does
    right (a missing accumulator rescale once got 'start the running maximum at -inf' and 'upcast the tiles')."""
    replacements, select, wanted, unwanted = HINT_BUGS[bug]
    text = SOLUTION
    for old, new in replacements:
        assert old in text, f"test setup: the solution changed, update the planted bug {bug!r}"
        text = text.replace(old, new)
    (tmp_path / "t1_attention.py").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "tests" / "test_t1_attention.py"), "-q", "-p", "no:cacheprovider"]
        + ["-k", select, "-c", str(REPO / "pyproject.toml"), "--rootdir", str(REPO)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "IMPL": str(tmp_path)},
    )
    assert proc.returncode == 1, f"'{bug}' was not caught:\n{proc.stdout[-1500:]}"
    failures = [line for line in proc.stdout.splitlines() if line.startswith("E ")]
    for hint in wanted:
        assert any(hint.lower() in line.lower() for line in failures), f"'{bug}': no '{hint}' hint:\n" + "\n".join(
            failures
        )
    for hint in unwanted:
        wrong = [line for line in failures if hint.lower() in line.lower()]
        assert not wrong, f"'{bug}' got the hint '{hint}', which blames something the code does right:\n" + "\n".join(
            wrong
        )


def online_softmax(x: torch.Tensor, start: float = -math.inf, subtract_max: bool = True) -> torch.Tensor:
    """A row softmax the way a t2 kernel computes it, a running max and sum over chunks of 256, with its two classic
    bugs: the running max started at 0 (``start``), or no max subtracted at all."""
    m = torch.full(x.shape[:-1], start if subtract_max else 0.0)
    total = torch.zeros_like(m)
    for c in range(0, x.shape[-1], 256):
        chunk = x[..., c : c + 256]
        new = torch.maximum(m, chunk.amax(-1)) if subtract_max else m
        total = total * torch.exp(m - new) + torch.exp(chunk - new[..., None]).sum(-1)
        m = new
    return torch.exp(x - m[..., None]) / total[..., None]


def test_the_cuda_tests_symptoms_tell_the_softmax_bugs_apart():
    """The CUDA tests' hints follow the same rule (t2's here, with a CPU stand-in for the kernel): the overflow hint
    only on inf or NaN, the running-max hint only on rows whose sum stayed 0, neither for code wrong everywhere."""
    from assignment.testing import edge_case_hint, empty_rows, non_finite_where_finite

    gen = torch.Generator().manual_seed(0)
    ordinary, huge, negative = (torch.randn(4, 1000, generator=gen) * s + o for s, o in ((1, 0), (1000, 0), (3, -1000)))

    def hint(kernel, x, symptom) -> str:
        right = torch.allclose(kernel(ordinary), torch.softmax(ordinary, -1), atol=1e-5)
        expected = torch.softmax(x.double(), -1)
        out = kernel(x)
        return edge_case_hint(
            "HINT", symptom=lambda: symptom(out, expected), right_on_ordinary_inputs=lambda: right, what="it", first="t"
        )()

    def no_max(x):
        return online_softmax(x, subtract_max=False)

    def max_starts_at_zero(x):
        return online_softmax(x, start=0.0)

    def wrong_everywhere(x):
        return online_softmax(x) * 1.01

    assert hint(no_max, huge, non_finite_where_finite) == "HINT"  # the overflow test
    assert hint(max_starts_at_zero, huge, non_finite_where_finite) == ""
    assert hint(max_starts_at_zero, negative, empty_rows) == "HINT"  # the rows-near--1000 test
    assert hint(online_softmax, negative, empty_rows) == ""
    for x, symptom in ((huge, non_finite_where_finite), (negative, empty_rows)):
        assert hint(wrong_everywhere, x, symptom).startswith("it is also wrong on ordinary inputs")
