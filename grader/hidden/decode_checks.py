"""Checks of the t6 decode kernel shared by the hidden suite's tests (the public tests' kinds, hidden shapes and seeds).

Inputs are made on the GPU and copied to the host before the kernel runs; every expected value is computed
after the launch has finished, from the host copies, in float64 (query heads share their KV head by a
reshape, never a copy, so the 65537-key cases stay small).
"""

from __future__ import annotations

import math

import torch

from assignment import kernels
from assignment.checks import require, same_bits
from assignment.testing import SENTINEL, assert_close

TAIL = 37  # the cache holds L + TAIL positions; every position at or past a row's length is NaN
LAYOUT_O, LAYOUT_LSE = "batch, head, dim", "batch, head"
SPLIT_HINT = (
    "Each split covers whole 32-key tiles of the length read from `lengths`; a split that starts past it "
    "is empty (O = 0, LSE = -inf, weight 0 in the combine)."
)
GRAPH_HINT = (
    "A graph replays the launch as captured: the length must be read on the GPU at every launch, and "
    "the split sizes follow it."
)


def decode_inputs(
    B: int,
    H: int,
    H_kv: int,
    L_max: int,
    d: int,
    lengths: list[int],
    seed: int,
    *,
    magnitude: float = 1.0,
    lengths_dtype: torch.dtype = torch.int32,
):
    """q (B, H, d) and a cache (B, H_kv, L_max, d) of random values below each row's length and NaN from it on;
    ``lengths`` holds one length per row, or one for every row."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, d, generator=gen, device="cuda") * magnitude
    k = torch.randn(B, H_kv, L_max, d, generator=gen, device="cuda")
    v = torch.randn(B, H_kv, L_max, d, generator=gen, device="cuda")
    for b in range(B):
        length = lengths[b if len(lengths) > 1 else 0]
        k[b, :, length:] = float("nan")
        v[b, :, length:] = float("nan")
    return q, k, v, torch.tensor(lengths, dtype=lengths_dtype, device="cuda")


def run_decode(q, k, v, lengths, **kwargs):
    """The student's (O, LSE), sentinel-filled before the call, and host copies of the inputs made before it;
    the inputs must come back unchanged."""
    hosts = tuple(t.cpu() for t in (q, k, v, lengths))
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:-1], SENTINEL, device=q.device)
    kernels.decode_attention(q, k, v, lengths, out=out, lse=lse, **kwargs)
    torch.cuda.synchronize()
    require(
        all(same_bits(t, h) for t, h in zip((q, k, v, lengths), hosts)),
        "inputs_modified",
        "an input (q, the cache or lengths) was modified; write only to O, LSE and the workspace",
    )
    return out, lse, hosts


def reference_decode(q, k, v, lengths, scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (O like q, LSE like q without d): row b attends to positions 0 .. lengths[b] - 1 (clamped to the
    cache); a row of length 0 gets O = 0 and LSE = -inf. Computed on the GPU from the host copies."""
    q, k, v = q.cuda(), k.cuda(), v.cuda()
    B, H, d = q.shape[0], q.shape[1], q.shape[-1]
    H_kv, L_max = k.shape[1], k.shape[2]
    groups = H // H_kv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    values = [int(x) for x in lengths.tolist()]
    outs, lses = [], []
    for b in range(B):
        n = min(max(values[b if len(values) > 1 else 0], 0), L_max)
        qb = q[b].reshape(H_kv, groups, d).double()
        if n == 0:
            outs.append(torch.zeros(H, d, dtype=torch.float64, device=q.device))
            lses.append(torch.full((H,), float("-inf"), dtype=torch.float64, device=q.device))
            continue
        scores = (qb @ k[b, :, :n].double().transpose(-1, -2)) * scale  # (H_kv, G, n)
        lse = torch.logsumexp(scores, dim=-1)  # (H_kv, G)
        outs.append((torch.exp(scores - lse[..., None]) @ v[b, :, :n].double()).reshape(H, d))
        lses.append(lse.reshape(H))
    return torch.stack(outs).reshape(q.shape), torch.stack(lses).reshape(q.shape[:-1])


def check_against_reference(
    out, lse, hosts, what: str, tol: dict, *, lse_tol: dict | None = None, hint: str = ""
) -> None:
    expected, expected_lse = reference_decode(*hosts)
    assert_close(out, expected, **tol, name=f"O ({what})", layout=LAYOUT_O, hint=hint)
    assert_close(
        lse,
        expected_lse,
        **(lse_tol or tol),
        name=f"LSE ({what})",
        layout=LAYOUT_LSE,
        hint="LSE = M + log2(sum of the splits' weights), in natural log.",
    )


def check_values(
    B: int,
    H: int,
    H_kv: int,
    L_max: int,
    d: int,
    lengths: list[int],
    seed: int,
    tol: dict,
    what: str,
    *,
    magnitude: float = 1.0,
    lse_tol: dict | None = None,
    hint: str = "",
    **kwargs,
) -> None:
    """O and LSE against float64 (``what`` names the case in messages; never a hidden shape)."""
    q, k, v, lens = decode_inputs(B, H, H_kv, L_max, d, lengths, seed, magnitude=magnitude)
    out, lse, hosts = run_decode(q, k, v, lens, **kwargs)
    check_against_reference(out, lse, hosts, what, tol, lse_tol=lse_tol, hint=hint)


def check_graph_replays(
    B: int, H: int, H_kv: int, L_max: int, d: int, steps: list[list[int]], seed: int, tol: dict
) -> None:
    """Capture one call at length 1, then grow the cache and the lengths in place and replay: every replay must
    match float64 at its lengths and read nothing past them (the cache is NaN there)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    keys = torch.randn(B, H_kv, L_max, d, generator=gen, device="cuda")
    values = torch.randn(B, H_kv, L_max, d, generator=gen, device="cuda")
    k_cache, v_cache = torch.full_like(keys, float("nan")), torch.full_like(values, float("nan"))
    q = torch.randn(B, H, d, generator=gen, device="cuda")
    lengths = torch.ones(B, dtype=torch.int32, device="cuda")
    out = torch.full((B, H, d), SENTINEL, device="cuda")
    lse = torch.full((B, H), SENTINEL, device="cuda")
    workspace = kernels.decode_workspace(q, k_cache)

    def grow(lens: list[int]) -> None:
        for row, length in enumerate(lens):
            k_cache[row, :, :length] = keys[row, :, :length]
            v_cache[row, :, :length] = values[row, :, :length]
        lengths.copy_(torch.tensor(lens, dtype=torch.int32))

    grow([1] * B)
    kernels.decode_attention(q, k_cache, v_cache, lengths, out=out, lse=lse, workspace=workspace)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels.decode_attention(q, k_cache, v_cache, lengths, out=out, lse=lse, workspace=workspace)
    for lens in steps:
        grow(lens)
        q.copy_(torch.randn(B, H, d, generator=gen, device="cuda"))
        out.fill_(SENTINEL)
        lse.fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        hosts = tuple(t.cpu() for t in (q, k_cache, v_cache, lengths))
        check_against_reference(out, lse, hosts, "a graph replay at grown lengths", tol, hint=GRAPH_HINT)
