"""Checks shared by the hidden attention suites: t4 and t5 (the same kernel, with and without the causal mask), and
t8 and t9 (their tensor-core kernels in fp16/bf16: ``kernel`` and ``dtype``).

Inputs live on the host; the kernel gets device copies; expected values are computed after the
student's launch has finished, from the host copies, so no stray device write can reach them.
"""

from __future__ import annotations

import torch

from assignment import kernels
from assignment.checks import require, same_bits
from assignment.testing import (
    SENTINEL,
    assert_close,
    assert_close_to_precision,
    assert_repeatable,
    reference_attention,
    same_precision_attention,
)

LAYOUT = "batch, head, query, dim"
# Rows whose scores are all -inf (``with_rows_of_minus_inf``): a small grid, and one large enough for the reference's
# 128-row tiles at d = 64 (t4's use_big_d64 on an H100's 132 SMs).
MINUS_INF_SHAPES = (
    {"B": 1, "H": 3, "H_kv": 1, "Lq": 150, "Lk": 77},
    {"B": 8, "H": 8, "H_kv": 2, "Lq": 777, "Lk": 500},
)
# t5's last key tiles. Every configuration of the kit's kernel, which runs t5's functions, takes KEY_TILE keys a tile and
# a multiple of KEY_TILE query rows (Cfg in solutions/t4_flash_attention.cu; tests/kit checks both), so the last key a
# full query tile sees, q0 + BR - 1 + Lk - Lq, lies at offset (Lk - Lq - 1) mod KEY_TILE of its key tile, whatever
# q0: KEY_TILE consecutive values of Lk - Lq put it at every offset. The small grid runs the 64-row tiles (every d),
# the large one the 128-row tiles the reference takes at d = 64 (use_big_d64; tests/kit checks both on the GPU).
KEY_TILE = 64
BOUNDARY_GRIDS = {
    "small": {"B": 1, "H": 2, "H_kv": 1, "Lq": 200},
    "large": {"B": 8, "H": 16, "H_kv": 4, "Lq": 500},
}
MINUS_INF_HINT = (
    "A row whose scores are all -inf: while the running max is -inf, subtract 0 inside exp2 (never -inf - (-inf)), "
    "and write O = 0 and LSE = -inf for a row whose sum l is 0."
)


def qkv_on_gpu(B, H, Lq, Lk, d, seed, magnitude=1.0, H_kv=None, dtype=None):
    """Normal random q (B, H, Lq, d) (times ``magnitude``), k and v (B, H_kv, Lk, d) made on the GPU (never
    zeros); H_kv defaults to H; rounded to ``dtype`` when given."""
    H_kv = H if H_kv is None else H_kv
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, Lq, d, generator=gen, device="cuda") * magnitude
    qkv = (
        q,
        torch.randn(B, H_kv, Lk, d, generator=gen, device="cuda"),
        torch.randn(B, H_kv, Lk, d, generator=gen, device="cuda"),
    )
    return qkv if dtype is None else tuple(t.to(dtype) for t in qkv)


def run_flash(q, k, v, causal, scale=None, kernel=None):
    """The student's (O, LSE) from ``kernel`` (default t4's ``flash_attention``) and host copies of the inputs made
    before the call; the inputs must come back unchanged. Expected values are then computed from the host copies."""
    kernel = kernels.flash_attention if kernel is None else kernel
    hosts = tuple(t.cpu() for t in (q, k, v))
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:3], SENTINEL, device=q.device)
    kernel(q, k, v, causal=causal, scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    require(
        all(same_bits(d, h) for d, h in zip((q, k, v), hosts)),
        "inputs_modified",
        "an input (q, k or v) was modified; write only to O and LSE",
    )
    return out, lse, hosts


def expected_on_gpu(q, k, v, causal, scale=None):
    return reference_attention(q.cuda(), k.cuda(), v.cuda(), causal=causal, scale=scale)


def check_values(shape, d, causal, seed, tol, magnitude=1.0, scale=None, strongly_negative=False, lse_tol=None):
    """O and LSE against float64 on ``shape`` (B, H, Lq, Lk and H_kv, the KV heads: H when absent), within
    ``tol`` (the LSE within ``lse_tol`` when given)."""
    q, k, v = qkv_on_gpu(shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed, magnitude, shape.get("H_kv"))
    if strongly_negative:  # q near +c, k near -c: every score near -120, whose exp underflows to 0
        shift = (120.0 / d**0.5) ** 0.5
        q, k = q * 0.3 + shift, k * 0.3 - shift
    out, lse, hosts = run_flash(q, k, v, causal, scale)
    expected, expected_lse = expected_on_gpu(*hosts, causal, scale)
    assert_close(out, expected, **tol, name="O", layout=LAYOUT)
    assert_close(lse, expected_lse, **(lse_tol or tol), name="LSE", layout="batch, head, query")


def with_rows_of_minus_inf(q, k):
    """(q, k, rows): q with -inf in dimension 0 of the query rows ``rows`` (every seventh, and the whole second tile
    of 64), k with dimension 0 made positive, so that each of those rows scores -inf against every key: a row whose
    scores are all -inf, as t5's fully masked rows are. The other rows stay ordinary."""
    rows = torch.zeros(q.shape[2], dtype=torch.bool, device=q.device)
    rows[3::7] = True
    rows[64:128] = True
    q, k = q.clone(), k.clone()
    k[..., 0] = k[..., 0].abs() + 0.5
    q[:, :, rows, 0] = float("-inf")
    return q, k, rows


def finite_rows(q: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """q with the -inf of ``with_rows_of_minus_inf`` set to 0: what the references compute from, so that no
    expected value rests on how a matrix product treats infinities (those rows are then set by hand)."""
    q = q.clone()
    q[:, :, rows.to(q.device), 0] = 0.0
    return q


def as_rows_that_see_nothing(out: torch.Tensor, lse: torch.Tensor, rows: torch.Tensor) -> None:
    """Expected O and LSE, in place: O = 0 and LSE = -inf on ``rows`` (the convention for a row that sees no key)."""
    out[:, :, rows.to(out.device)] = 0.0
    lse[:, :, rows.to(lse.device)] = float("-inf")


def check_rows_of_minus_inf(shape, d, seed, tol):
    """O and LSE against float64 with some query rows' scores all -inf (``with_rows_of_minus_inf``): those rows must
    give O = 0 and LSE = -inf, never NaN, and the others their ordinary values."""
    q, k, v = qkv_on_gpu(shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed, H_kv=shape.get("H_kv"))
    q, k, rows = with_rows_of_minus_inf(q, k)
    out, lse, (q, k, v) = run_flash(q, k, v, False)
    expected, expected_lse = expected_on_gpu(finite_rows(q, rows), k, v, False)
    as_rows_that_see_nothing(expected, expected_lse, rows)
    assert_close(out, expected, **tol, name="O, rows of -inf scores", layout=LAYOUT, hint=MINUS_INF_HINT)
    assert_close(
        lse, expected_lse, **tol, name="LSE, rows of -inf scores", layout="batch, head, query", hint=MINUS_INF_HINT
    )


def boundary_shapes(grid: dict) -> list[dict]:
    """``grid`` with Lk from Lq - KEY_TILE / 2 to Lq + KEY_TILE / 2 - 1: Lk - Lq at every residue modulo KEY_TILE,
    rows that see no key (Lk < Lq) and a chunk after cached keys (Lk > Lq) alike."""
    return [dict(grid, Lk=grid["Lq"] + offset) for offset in range(-KEY_TILE // 2, KEY_TILE // 2)]


def check_group_sharing(causal, seed, d=64, dtype=None, kernel=None):
    """Query heads that share a KV head give bitwise what they give with that head repeated for each."""
    q, k, v = qkv_on_gpu(3, 8, 150, 97, d, seed, H_kv=2, dtype=dtype)
    grouped = run_flash(q, k, v, causal, kernel=kernel)[:2]
    repeated = run_flash(
        q,
        k.repeat_interleave(4, dim=1).contiguous(),
        v.repeat_interleave(4, dim=1).contiguous(),
        causal,
        kernel=kernel,
    )[:2]
    require(
        all(torch.equal(a, b) for a, b in zip(grouped, repeated)),
        "mismatch",
        "O or LSE with 8 query heads over 2 KV heads differs from the same attention with the KV heads repeated: "
        "query head h must read KV head h / (H / H_kv) of its own batch",
        "grouped-query attention reads the wrong K/V head",
    )


def check_repeatable(causal, seed, repeats=20, dtype=None, kernel=None, message=None):
    kernel = kernels.flash_attention if kernel is None else kernel
    q, k, v = qkv_on_gpu(2, 3, 333, 517, 64, seed, dtype=dtype)
    assert_repeatable(
        lambda: kernel(q, k, v, causal=causal),
        repeats,
        message or "O or LSE changed between identical runs: a race (a missing __syncthreads?)",
    )


def check_low_precision_values(task, kernel, shape, d, dtype, causal, seed, magnitude=1.0, scale=None, minus_inf=False):
    """A tensor-core kernel's fp16/bf16 O within ``task``'s precision rule and its LSE against float64 (t8, t9);
    ``minus_inf``: some rows' scores all -inf (with_rows_of_minus_inf), which must give O = 0 and LSE = -inf."""
    q, k, v = qkv_on_gpu(
        shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed, magnitude, shape["H_kv"], dtype=dtype
    )
    rows = None
    if minus_inf:
        q, k, rows = with_rows_of_minus_inf(q, k)
    out, lse, hosts = run_flash(q, k, v, causal, scale, kernel=kernel)
    on_gpu = tuple(t.cuda() for t in hosts)
    if rows is not None:
        on_gpu = (finite_rows(on_gpu[0], rows), *on_gpu[1:])
    expected, expected_lse = reference_attention(*on_gpu, causal=causal, scale=scale)
    same = same_precision_attention(*on_gpu, causal=causal, scale=scale)
    if rows is not None:
        as_rows_that_see_nothing(expected, expected_lse, rows)
        same[:, :, rows] = 0.0
    require(out.dtype == dtype, "dtype", f"O must keep the input dtype {dtype}, got {out.dtype}")
    hint = MINUS_INF_HINT if minus_inf else ""
    assert_close_to_precision(
        out, expected, same, **task.tol(str(dtype).replace("torch.", "")), name="O", layout=LAYOUT, hint=hint
    )
    assert_close(lse, expected_lse, **task.tol("lse"), name="LSE", layout="batch, head, query", hint=hint)
