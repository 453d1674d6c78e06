"""assignment.testing's comparisons: the summaries the grader shows for a hidden check give the share of bad
elements as a plain percentage (never '1e+02%'), at every size of that share."""

from __future__ import annotations

import pytest
import torch

from assignment.testing import compare, percent

pytestmark = pytest.mark.kit


@pytest.mark.parametrize(
    "part, whole, shown",
    [
        (0, 10, "0%"),
        (1, 1_000_000, "<0.01%"),
        (1, 10_000, "0.01%"),
        (31, 1000, "3.1%"),
        (5, 10, "50%"),
        (421, 1000, "42%"),
        (994, 1000, "99%"),
        (997, 1000, ">99%"),
        (1000, 1000, "100%"),
    ],
)
def test_percent_is_plain_and_never_rounds_to_all_or_nothing(part, whole, shown):
    assert percent(part, whole) == shown


@pytest.mark.parametrize("bad", [1.0, float("nan")], ids=["mismatch", "nan"])
def test_a_check_that_fails_everywhere_says_100_percent(bad):
    expected = torch.zeros(4, 8)
    result = compare(expected + bad, expected, atol=1e-6, rtol=0.0, name="O")
    assert not result.ok and "100% of the elements" in result.summary and "e+" not in result.summary, result.summary
