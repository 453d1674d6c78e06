"""The public t1 tests can fail: each planted bug is caught by the test meant for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
