"""Public tests for task t5: causal masking in the CUDA FlashAttention kernel. Run: ``make test T=t5``."""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import (
    SENTINEL,
    assert_close,
    assert_repeatable,
    attention_edge_hint,
    check_todo_regions,
    empty_rows,
    non_finite_where_finite,
    random_qkv,
    reference_attention,
)

pytestmark = pytest.mark.t5
TASK = load_registry().task("t5")
TOL = TASK.tol("float32")


@pytest.mark.parametrize("d", [32, 64, 128])
@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: "B{B}H{H}Hkv{H_kv}Lq{Lq}Lk{Lk}".format(**s))
def test_causal_matches_float64(shape, d, seed):
    # k and v have H_kv heads (grouped-query attention, t4's mapping); Lq < Lk is a chunk after cached keys.
    q, k, v = random_qkv(
        shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed=seed, device="cuda", kv_heads=shape["H_kv"]
    )
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:3], SENTINEL, device="cuda")
    kernels.flash_attention(q, k, v, causal=True, out=out, lse=lse)
    expected, expected_lse = reference_attention(q, k, v, causal=True)
    hint = TASK.hint
    where = f"d={d}, H={shape['H']}, H_kv={shape['H_kv']}"
    assert_close(out, expected, **TOL, name=f"causal O ({where})", layout="batch, head, query, dim", hint=hint)
    assert_close(lse, expected_lse, **TOL, name=f"causal LSE ({where})", layout="batch, head, query", hint=hint)


def test_every_offset_of_the_last_key_tile(seed):
    # The kit's kernel takes key tiles of 64 and query tiles of a multiple of 64 rows, so the last key a query tile
    # sees (its last row's, q0 + BR - 1 + Lk - Lq) lies at offset (Lk - Lq - 1) mod 64 of its key tile. Lk - Lq over 64
    # consecutive values puts it at every offset: a loop bound one tile short at one of them loses keys there only.
    hint = (
        "causal_key_tiles counts the tiles up to and including the one holding the last key the tile's last row "
        "sees: last / BC + 1 of them (not a rounded-up last / BC, one tile short when that key starts its tile)."
    )
    for offset in range(-32, 32):
        Lq, Lk = 200, 200 + offset
        q, k, v = random_qkv(1, 2, Lq, Lk, 64, seed=seed, device="cuda", kv_heads=1)
        out, lse = kernels.flash_attention(q, k, v, causal=True)
        expected, expected_lse = reference_attention(q, k, v, causal=True)
        where = f"Lq {Lq}, Lk {Lk}: the last key of a query tile at offset {(Lk - Lq - 1) % 64} of its key tile"
        assert_close(out, expected, **TOL, name=f"causal O ({where})", layout="batch, head, query, dim", hint=hint)
        assert_close(lse, expected_lse, **TOL, name=f"causal LSE ({where})", layout="batch, head, query", hint=hint)


def test_keys_a_query_cannot_see_are_never_read(seed):
    # Causal self-attention: the first query tile sees only the first keys. Poison the rest:
    # a kernel that loads them (even to mask them) leaks NaN into O through P @ V.
    q, k, v = random_qkv(1, 1, 512, 512, 64, seed=seed, device="cuda")
    k[:, :, 256:] = float("nan")
    v[:, :, 256:] = float("nan")
    out, _ = kernels.flash_attention(q, k, v, causal=True)
    assert bool(torch.isfinite(out[:, :, :128]).all()), (
        "the first query rows read key tiles that lie entirely in their future: stop the key loop at the last "
        "visible tile instead of masking whole tiles"
    )


def test_strongly_negative_scores(seed):
    # Every score near -120 (and Lq > Lk, so some rows see no key): exp() underflows to 0 unless the running
    # maximum is subtracted.
    q, k, v = random_qkv(1, 2, 200, 150, 64, seed=seed, device="cuda")
    q, k = q * 0.3 + 3.9, k * 0.3 - 3.9
    out, lse = kernels.flash_attention(q, k, v, causal=True)
    expected, expected_lse = reference_attention(q, k, v, causal=True)
    underflow = (
        "Start the running maximum m at -inf, not 0: with every score near -120, exp2(s - 0) is 0 and l stays 0."
    )
    hint = attention_edge_hint(
        underflow,
        lambda: non_finite_where_finite(lse, expected_lse) or empty_rows(out, expected),
        lambda *qkv: kernels.flash_attention(*qkv, causal=True),
        q,
        k,
        v,
        tol=TOL,
        first="test_causal_matches_float64",
        causal=True,
        what="the kernel",
    )
    assert_close(out, expected, **TOL, name="causal O, scores near -120", layout="batch, head, query, dim", hint=hint)
    assert_close(lse, expected_lse, **TOL, name="causal LSE, scores near -120", layout="batch, head, query", hint=hint)


def test_repeatable_bitwise(seed):
    q, k, v = random_qkv(2, 3, 517, 333, 64, seed=seed, device="cuda")
    assert_repeatable(
        lambda: kernels.flash_attention(q, k, v, causal=True),
        10,
        "O or LSE changed between identical runs: a race (a missing __syncthreads?)",
    )


def test_todo_regions_are_device_code_only():
    check_todo_regions("t4_flash_attention.cu", ("t5",))
