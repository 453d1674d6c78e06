"""Public tests for task t6: the split-KV decode-attention kernel (``t6_decode_attention.cu``).

One query token per (batch, head) over a static KV cache (B, H_kv, L_max, d) whose current length lives
on the GPU. Every cache position at or past a row's length holds NaN: a kernel that reads one leaks it.

Run: ``make test T=t6``.
"""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import (
    SENTINEL,
    assert_close,
    assert_repeatable,
    check_todo_regions,
    edge_case_hint,
    local_memory_of,
    non_finite_where_finite,
    passes,
    reference_attention,
)

pytestmark = pytest.mark.t6
TASK = load_registry().task("t6")
TOL = TASK.tol("float32")
HEAD_DIMS = (32, 64, 128)
TAIL = 37  # L_max = L + TAIL: the cache is never full, and its tail is NaN
SPLIT_HINT = (
    "Each split covers whole 32-key tiles [start, end) of the length read from `lengths`; a split that "
    "starts past it is empty (O = 0, LSE = -inf, weight 0 in the combine)."
)
GQA_HINT = "Query head h reads KV head h / (H / H_kv); the cache of batch b starts at KV head b * H_kv."


def decode_inputs(
    B: int, H: int, H_kv: int, L_max: int, d: int, lengths: list[int], *, seed: int, magnitude: float = 1.0
):
    """q (B, H, d) and a cache (B, H_kv, L_max, d) holding random keys/values below each row's length, NaN past it."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, d, generator=gen) * magnitude
    k = torch.randn(B, H_kv, L_max, d, generator=gen)
    v = torch.randn(B, H_kv, L_max, d, generator=gen)
    for b in range(B):
        length = lengths[b if len(lengths) > 1 else 0]
        k[b, :, length:] = float("nan")
        v[b, :, length:] = float("nan")
    return q.cuda(), k.cuda(), v.cuda(), torch.tensor(lengths, dtype=torch.int32, device="cuda")


def reference_decode(q, k_cache, v_cache, lengths) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (O (B, H, d), LSE (B, H)): row b attends to cache positions 0 .. lengths[b] - 1."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        length = int(lengths[b if lengths.numel() > 1 else 0])
        o, lse = reference_attention(q[b, :, None, :], k_cache[b, :, :length], v_cache[b, :, :length])
        outs.append(o[:, 0])
        lses.append(lse[:, 0])
    return torch.stack(outs), torch.stack(lses)


def run_decode(q, k_cache, v_cache, lengths, **kwargs):
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:-1], SENTINEL, device=q.device)
    kernels.decode_attention(q, k_cache, v_cache, lengths, out=out, lse=lse, **kwargs)
    torch.cuda.synchronize()
    return out, lse


def check_against_reference(q, k, v, lengths, out, lse, what: str, hint: str = "", **tol) -> None:
    expected, expected_lse = reference_decode(q, k, v, lengths)
    tol = tol or TOL
    assert_close(out, expected, **tol, name=f"O ({what})", layout="batch, head, dim", hint=hint or TASK.hint)
    assert_close(
        lse,
        expected_lse,
        **tol,
        name=f"LSE ({what})",
        layout="batch, head",
        hint="LSE = M + log2(sum of the splits' weights), converted to natural log.",
    )


def _value_cases():
    """(L, B, H, H_kv) from the registry: every length of the issue, every kind of group."""
    return [
        pytest.param(s["L"], s["B"], s["H"], s["H_kv"], id=f"L{s['L']}-B{s['B']}-H{s['H']}-Hkv{s['H_kv']}")
        for s in TASK.public_shapes
    ]


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("L, B, H, H_kv", _value_cases())
def test_decode_matches_float64(L, B, H, H_kv, d, seed):
    # Rows of a batch have their own lengths (the second about half the first); the cache is longer than both.
    lengths = [L, L // 2 + 1][:B]
    q, k, v, lens = decode_inputs(B, H, H_kv, L + TAIL, d, lengths, seed=seed)
    out, lse = run_decode(q, k, v, lens)
    hint = TASK.hint + " " + SPLIT_HINT + (" " + GQA_HINT if H_kv < H else "")
    check_against_reference(q, k, v, lens, out, lse, f"L={lengths}, H={H}, H_kv={H_kv}, d={d}", hint)


@pytest.mark.parametrize(
    "H, H_kv", [(32, 8), (32, 1), (12, 4), (20, 4)], ids=["llama3-groups4", "mqa-32heads", "groups3", "groups5"]
)
@pytest.mark.parametrize("d", [64, 128])
def test_group_sizes(H, H_kv, d, seed):
    # Groups of 4 (Llama 3), 32 (more than one block's worth of query heads), and sizes that are not powers of 2.
    q, k, v, lens = decode_inputs(2, H, H_kv, 3000, d, [2999, 1234], seed=seed)
    out, lse = run_decode(q, k, v, lens)
    check_against_reference(q, k, v, lens, out, lse, f"H={H}, H_kv={H_kv}, d={d}", GQA_HINT)


@pytest.mark.parametrize("num_splits", [1, 3, 7, 13, 31, 40, 100])
def test_split_counts_that_do_not_divide_the_length(num_splits, seed):
    # 1000 and 777 keys are 32 and 25 tiles: 3, 7, 13 and 31 splits leave a short last split; 40 and 100 splits
    # leave empty ones; 1 split is one block per (b, KV head) doing everything.
    q, k, v, lens = decode_inputs(2, 8, 2, 1000, 64, [1000, 777], seed=seed)
    out, lse = run_decode(q, k, v, lens, num_splits=num_splits)
    check_against_reference(q, k, v, lens, out, lse, f"{num_splits} splits", SPLIT_HINT)


def test_query_heads_of_a_group_share_one_kv_head(seed):
    # The same attention with the KV heads repeated to one per query head must give bitwise the same O and LSE
    # (same split count: the split boundaries are the same, so every head does the same arithmetic).
    q, k, v, lens = decode_inputs(2, 8, 2, 700, 64, [650, 301], seed=seed)
    grouped = run_decode(q, k, v, lens, num_splits=5)
    repeated = run_decode(q, k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1), lens, num_splits=5)
    for name, a, b in (("O", grouped[0], repeated[0]), ("LSE", grouped[1], repeated[1])):
        assert torch.equal(a, b), (
            f"{name} with H = 8 query heads over H_kv = 2 KV heads differs from the same "
            f"attention with the KV heads repeated. {GQA_HINT}"
        )


def test_lengths_int64_broadcast_and_4d_query(seed):
    # lengths as int64, or one length (shape (1,)) for every row; q as (B, H, 1, d) like the model's.
    q, k, v, lens = decode_inputs(3, 4, 2, 500, 32, [345], seed=seed)
    out, lse = run_decode(q, k, v, lens)
    check_against_reference(q, k, v, lens, out, lse, "one int32 length for all rows")
    out64, lse64 = run_decode(q, k, v, torch.full((3,), 345, dtype=torch.int64, device="cuda"))
    out4, lse4 = run_decode(q[:, :, None, :].contiguous(), k, v, lens)
    assert torch.equal(out64, out) and torch.equal(lse64, lse), "int64 lengths (B,) must give the int32 (1,) result"
    assert torch.equal(out4[:, :, 0], out) and torch.equal(lse4[:, :, 0], lse), "q (B, H, 1, d) must equal q (B, H, d)"


def test_row_of_length_zero(seed):
    # Not a decode step, but a row that sees no key must give O = 0 and LSE = -inf, not NaN, and leave the
    # other rows alone.
    q, k, v, lens = decode_inputs(2, 4, 2, 200, 64, [0, 150], seed=seed)
    out, lse = run_decode(q, k, v, lens)
    check_against_reference(
        q,
        k,
        v,
        lens,
        out,
        lse,
        "a row of length 0",
        "Every split of a row of length 0 is empty: its combine sees only weights of 0.",
    )


def test_large_logits(seed):
    shape, lengths = (2, 8, 2, 2100, 64), [2048, 999]
    q, k, v, lens = decode_inputs(*shape, lengths, seed=seed, magnitude=30.0)
    out, lse = run_decode(q, k, v, lens)
    expected, expected_lse = reference_decode(q, k, v, lens)
    ordinary = decode_inputs(*shape, lengths, seed=7)
    hint = edge_case_hint(
        "exp2() overflowed: subtract the running max inside exp2() (scores this large overflow float32).",
        symptom=lambda: non_finite_where_finite(out, expected) or non_finite_where_finite(lse, expected_lse),
        right_on_ordinary_inputs=lambda: passes(
            lambda: check_against_reference(*ordinary, *run_decode(*ordinary), "ordinary inputs")
        ),
        what="the kernel",
        first="test_decode_matches_float64",
    )
    assert_close(
        out, expected, **TASK.tol("large_logits"), name="O with logits x30", layout="batch, head, dim", hint=hint
    )
    assert_close(
        lse, expected_lse, **TASK.tol("large_logits_lse"), name="LSE with logits x30", layout="batch, head", hint=hint
    )


def test_repeatable_bitwise(seed):
    q, k, v, lens = decode_inputs(2, 8, 2, 5000, 128, [4999, 2500], seed=seed)
    assert_repeatable(
        lambda: kernels.decode_attention(q, k, v, lens),
        10,
        "O or LSE changed between identical runs: a race (a missing __syncthreads?) or an "
        "order of additions that depends on timing",
    )


def test_cuda_graph_replays_at_growing_lengths(seed):
    # Capture one call, then grow the cache and the lengths in place and replay: the graph must follow the
    # lengths it reads on the GPU (split sizes included) and never read past them.
    B, H, H_kv, L_max, d = 2, 8, 2, 3000, 64
    gen = torch.Generator().manual_seed(seed)
    keys, values = (torch.randn(B, H_kv, L_max, d, generator=gen).cuda() for _ in range(2))
    k_cache, v_cache = torch.full_like(keys, float("nan")), torch.full_like(values, float("nan"))
    q = torch.randn(B, H, d, generator=gen).cuda()
    lengths = torch.ones(B, dtype=torch.int32, device="cuda")
    out = torch.full((B, H, d), SENTINEL, device="cuda")
    lse = torch.full((B, H), SENTINEL, device="cuda")
    workspace = kernels.decode_workspace(q, k_cache)

    def grow(steps: list[int]) -> None:
        for row, length in enumerate(steps):
            k_cache[row, :, :length] = keys[row, :, :length]
            v_cache[row, :, :length] = values[row, :, :length]
        lengths.copy_(torch.tensor(steps, dtype=torch.int32))

    grow([1, 1])
    kernels.decode_attention(q, k_cache, v_cache, lengths, out=out, lse=lse, workspace=workspace)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels.decode_attention(q, k_cache, v_cache, lengths, out=out, lse=lse, workspace=workspace)
    for length in (1, 2, 31, 32, 33, 100, 999, 1024, 2047, 2999, 3000):
        steps = [length, max(1, length // 3)]
        grow(steps)
        q.copy_(torch.randn(B, H, d, generator=gen))  # the new token's query
        out.fill_(SENTINEL)
        lse.fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(
            q,
            k_cache,
            v_cache,
            lengths,
            out,
            lse,
            f"graph replay at lengths {steps}",
            "The length must be read on the GPU at every launch (a graph replays the launch "
            "as captured: arguments computed on the host at capture time never change).",
        )


def test_no_scores_in_local_memory():
    used, limit = local_memory_of("t6_decode_attention.cu", ("t6",))
    assert used <= limit, (
        f"a kernel uses {used} bytes of local memory per thread (limit {limit}): keep a lane's "
        "scores and accumulators in registers (arrays indexed only by unrolled loop counters)"
    )


def test_todo_regions_are_device_code_only():
    check_todo_regions("t6_decode_attention.cu", ("t6",))
