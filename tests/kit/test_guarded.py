"""``guarded`` inputs and outputs: reads and writes past an edge are deterministic and found (CPU)."""

from __future__ import annotations

import pytest
import torch

from assignment.checks import CheckFailure
from assignment.testing import _bands, assert_guards_intact, guarded


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_guarded_keeps_the_values_between_two_nan_bands(dtype):
    t = torch.randn(3, 5, 7).to(dtype)
    g = guarded(t)
    assert g.shape == t.shape and g.dtype == dtype and g.is_contiguous()
    assert torch.equal(g, t), "the guarded copy must hold the same values"
    before, after = _bands(g)
    assert before.numel() * g.element_size() >= 1 << 20 and after.numel() >= before.numel()
    assert bool(torch.isnan(before).all()) and bool(torch.isnan(after).all())
    assert (g.storage_offset() * g.element_size()) % 256 == 0, "the tensor must start 256-byte aligned"
    assert_guards_intact(g, "C")


def test_a_band_at_least_as_long_as_the_tensor():
    t = torch.zeros(1 << 19)  # 2 MiB: the band grows with it
    before, after = _bands(guarded(t))
    assert before.numel() >= t.numel() and after.numel() >= t.numel()


def test_a_read_past_the_end_reads_nan():
    a = guarded(torch.ones(4, 4))
    past = a.view(-1).as_strided((8,), (1,), a.storage_offset() + 12)  # the last row and one row beyond
    assert torch.equal(past[:4], torch.ones(4)) and bool(torch.isnan(past[4:]).all())


@pytest.mark.parametrize("side", ["after", "before"])
def test_a_write_outside_is_reported_with_its_distance(side):
    c = guarded(torch.zeros(2, 3))
    before, after = _bands(c)
    if side == "after":
        after[4] = 1.0
    else:
        before[-2] = 1.0
    with pytest.raises(CheckFailure) as failure:
        assert_guards_intact(c, "C", layout="row, col")
    assert failure.value.kind == "out_of_bounds_write"
    message = str(failure.value)
    assert (
        ("5 element(s) after its last" in message) if side == "after" else ("2 element(s) before its first" in message)
    )
    assert "(row, col)" in message and "store" in message
    assert "C" in failure.value.summary and "5" not in failure.value.summary, "the summary must not tell offsets"
