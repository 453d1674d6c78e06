"""Failed checks with a kind: what the grader may tell a student about a hidden check.

Every check (public or hidden) fails by raising ``CheckFailure``: its message teaches (max error,
first bad index, a hint) and is what a public test shows; its ``kind`` and ``summary`` are what the
grader shows for a hidden check, which must not tell the inputs. The timing harness raises them too.
"""

from __future__ import annotations

import torch

# The kinds of failed check the grader reports to a student (what went wrong, never the inputs).
CHECK_KINDS = {
    "mismatch": "wrong values",
    "nan": "NaN or inf where a finite value was expected",
    "unwritten": "output elements never written",
    "shape": "wrong shape or dtype",
    "inputs_modified": "an input was modified",
    "out_of_bounds_write": "an output written outside its bounds",
    "not_repeatable": "results differ between identical runs (a race?)",
    "memory_error": "an illegal memory access or a race found by compute-sanitizer",
    "structure": "the algorithm's structure (tiling, skipped blocks) is not what the task asks",
    "forbidden": "a forbidden operation",
    "too_slow": "slower than the timing rubric allows",
}


class CheckFailure(AssertionError):
    """A failed check: ``kind`` (a key of CHECK_KINDS), the full message (shown by public tests) and a
    ``summary`` that gives the size of the error but nothing about the inputs (shown for hidden tests)."""

    def __init__(self, kind: str, message: str, summary: str = ""):
        super().__init__(message)
        self.kind, self.summary = kind, summary or CHECK_KINDS.get(kind, kind)


def require(condition: bool, kind: str, message: str, summary: str = "") -> None:
    """``assert condition, message`` with a kind the grader can report."""
    if not condition:
        raise CheckFailure(kind, message, summary)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (a NaN equals the same NaN, unlike torch.equal), on a's device."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().contiguous(), b.detach().to(a.device).contiguous()
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
