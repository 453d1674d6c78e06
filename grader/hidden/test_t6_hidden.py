"""Hidden tests for task t6 (prefill and decode with a KV cache; instructor-only, never shipped).

Two files, two trust paths. The decode kernel (t6_decode_attention.cu) is device code spliced into the kit's
host code, so it runs here, through the kit's wrappers, like t4's (decode_checks.py). The cache
(t6_kv_cache.py) is Python: it runs only in the sandboxed worker, inside kit scenarios (grader/hidden/t6_driver.py,
which this suite hands the worker as its driver) that build the cache, the shipped checkpoint or a random model
around it and send back plain tensors; every expected value is computed here. The stand-in kernels the cache's
dispatch calls are served by this process (``stand_in_kernels``: the driver's ``RecordingKernels``), so the record
of those calls is this process's. The GPU scenarios run the graded kernels in the worker too (libraries this
process built, see grader/isolation/client.py), the kit's t4/t5 kernel for the prefill (the grader puts it beside
the spliced t6 file), so t6 is graded on its own.

Checks marked ``cpu`` run without a GPU (the cache's writes and dispatch, a small model on the kit's reference
attention); on a GPU host they run on the CPU and on the GPU. Seeds, drawn shapes, positions and tokens change
with every grading; test ids carry none of them.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from functools import cache, lru_cache

import pytest
import torch

from assignment.checks import CheckFailure, require
from assignment.registry import load_registry
from assignment.testing import SENTINEL, assert_close, assert_repeatable, reference_attention
from grader.hidden import decode_checks as checks
from grader.hidden import common
from grader.hidden.common import cases, check_local_memory, check_sanitizer, sanitizer_tools, time_rule
from grader.isolation.client import KitObject, WorkerFailure, student_module
from grader.hidden.t6_driver import SOURCE as DRIVER_FILE
from grader.hidden.t6_driver import RecordingKernels, output_shift

# Under a full grading's load a t6 check without a cost of its own took 1-2 s (grader/records/issue35_speed_h200.txt):
# the default for dealing its checks to checkers (its slow ones carry their own).
pytestmark = [pytest.mark.t6, pytest.mark.cost(1.5)]
TASK = load_registry().task("t6")
TOL = TASK.tol("float32")
LOGITS = TASK.tol("logits")
CASES = cases(TASK)
DIMS = [pytest.param(d, id=f"dim{i}") for i, d in enumerate((32, 64, 128))]
PUBLIC = "make test T=t6"
CACHE_FILE = "t6_kv_cache.py"
# The CUDA files the worker's kit wrappers run: the graded decode kernel, and the t4/t5 kernel for the prefill.
WORKER_KERNELS = ("t6_decode_attention.cu", "t4_flash_attention.cu")
UPDATE_HINT = (
    "update(input_pos, k, v) writes k[:, :, t] at position input_pos[t] of the first B rows and nothing "
    "else, returns views of those rows of the buffers, and sets lengths[0] = input_pos[-1] + 1 on the "
    "cache's device."
)
DISPATCH_HINT = (
    "T == 1: kernels.decode_attention over the whole buffers with the device lengths; T > 1: "
    "kernels.flash_attention(causal=True) over positions 0 .. kv_len - 1."
)
LOGITS_HINT = "prefill then decode at position p must give the logits of one full forward pass at p."
KERNEL_OUTPUT_HINT = (
    "attend returns what the kernel returned (the checks' stand-in kernels shift their answers by a vector of "
    "their own), never attention computed beside it."
)


def student():
    return student_module(CACHE_FILE, forbidden=TASK.rules.forbidden, driver=DRIVER_FILE, kernels=WORKER_KERNELS)


def stand_in_kernels(shift_seed: int) -> KitObject:
    """Kernels served by this process to the student's cache (the worker's stand-in calls them): each call recorded
    here, its answer shifted by a vector of ``shift_seed``, which never leaves this process."""
    return KitObject("kernels", {"shift_seed": shift_seed}, make=RecordingKernels)


@pytest.fixture(scope="module", autouse=True)
def _worker_started():
    if os.environ.get("KIT_PHASE") != "timing":  # the timing checks start the worker only for the model rule
        student().worker.prestart()


def rng_for(seed: int, *labels) -> random.Random:
    """This grading's random choices for one check (the same on every device)."""
    return random.Random(":".join(map(str, (seed, *labels))))


def torch_seed(rng: random.Random) -> int:
    return rng.getrandbits(62)


def scenario_failure(exc: WorkerFailure, what: str) -> None:
    """A worker failure in a scenario, said as the check's own failure where the cause is known."""
    text = str(exc)
    if exc.kind == "exception" and text.startswith("GraphCaptureError"):
        raise CheckFailure(
            "structure",
            f"{what}: {text}",
            f"{what}: the decode step could not be captured in a CUDA graph: the decode path reads a GPU "
            "value on the host (.item(), .tolist(), int(tensor), an if on a tensor: a host sync) or "
            "makes tensors whose size depends on the position",
        ) from None
    raise exc


# ================================================================================== the decode kernel (here)


def row_lengths(rng: random.Random, B: int, L: int) -> list[int]:
    """Row 0 sees the case's length, the other rows lengths of their own (at least 1)."""
    return [L] + [rng.randint(1, L) for _ in range(B - 1)]


@pytest.mark.reproduce(f"{PUBLIC} (test_decode_matches_float64)")
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", CASES)
def test_values(shape, d, seed):
    B, H, H_kv, L = shape["B"], shape["H"], shape["H_kv"], shape["L"]
    rng = rng_for(seed, "values", B, H, H_kv, L, d)
    checks.check_values(
        B,
        H,
        H_kv,
        L + checks.TAIL,
        d,
        row_lengths(rng, B, L),
        torch_seed(rng),
        TOL,
        "decode",
        hint=f"{TASK.hint} {checks.SPLIT_HINT}",
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_large_logits)")
@pytest.mark.parametrize("d", DIMS)
def test_large_logits(d, seed):
    rng = rng_for(seed, "large", d)
    L = rng.randint(1500, 2500)
    checks.check_values(
        2,
        8,
        2,
        L + checks.TAIL,
        d,
        row_lengths(rng, 2, L),
        torch_seed(rng),
        TASK.tol("large_logits"),
        "logits x30",
        magnitude=30.0,
        lse_tol=TASK.tol("large_logits_lse"),
        hint="Subtract the running max inside exp2() and rescale the accumulator and the sum when it grows.",
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_lengths_int64_broadcast_and_4d_query)")
def test_lengths_int64_broadcast_and_4d_query(seed):
    rng = rng_for(seed, "int64")
    L_max = rng.randint(300, 700)
    length = rng.randint(L_max // 2, L_max)
    q, k, v, lens64 = checks.decode_inputs(3, 4, 2, L_max, 32, [length], torch_seed(rng), lengths_dtype=torch.int64)
    out, lse, hosts = checks.run_decode(q, k, v, lens64)
    checks.check_against_reference(out, lse, hosts, "one int64 length for every row", TOL)
    per_row = torch.full((3,), length, dtype=torch.int32, device="cuda")
    out32, lse32, _ = checks.run_decode(q, k, v, per_row)
    out4, lse4, _ = checks.run_decode(q[:, :, None, :].contiguous(), k, v, lens64)
    require(
        torch.equal(out32, out) and torch.equal(lse32, lse),
        "mismatch",
        "int32 lengths (B,) must give bitwise what one int64 length (1,) of the same value gives",
        "int32 per-row lengths and one int64 length of the same value give different results",
    )
    require(
        torch.equal(out4[:, :, 0], out) and torch.equal(lse4[:, :, 0], lse),
        "mismatch",
        "q (B, H, 1, d) must give bitwise what q (B, H, d) gives",
        "a 4-D q (B, H, 1, d) gives other results",
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_row_of_length_zero)")
def test_row_of_length_zero(seed):
    rng = rng_for(seed, "zero")
    L_max = rng.randint(100, 400)
    lengths = [0, rng.randint(1, L_max), rng.randint(1, L_max)]
    rng.shuffle(lengths)
    checks.check_values(
        3,
        4,
        2,
        L_max,
        64,
        lengths,
        torch_seed(rng),
        TOL,
        "a row of length 0",
        hint="Every split of a row of length 0 is empty: O = 0 and LSE = -inf, not NaN.",
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_split_counts_that_do_not_divide_the_length)")
@pytest.mark.parametrize(
    "num_splits", [pytest.param(n, id=f"splits{i}") for i, n in enumerate((1, 3, 7, 13, 31, 40, 100))]
)
def test_split_counts_that_do_not_divide_the_length(num_splits, seed):
    # Lengths that are no multiple of the 32-key tile nor of the split count; 40 and 100 splits leave empty ones.
    rng = rng_for(seed, "splits", num_splits)
    L_max = rng.randint(900, 1300)
    lengths = [L_max - rng.randint(0, 31), rng.randint(1, L_max)]
    checks.check_values(
        2,
        8,
        2,
        L_max,
        64,
        lengths,
        torch_seed(rng),
        TOL,
        "a given split count",
        hint=checks.SPLIT_HINT,
        num_splits=num_splits,
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_query_heads_of_a_group_share_one_kv_head)")
def test_query_heads_of_a_group_share_one_kv_head(seed):
    rng = rng_for(seed, "groups")
    L_max = rng.randint(500, 900)
    q, k, v, lens = checks.decode_inputs(
        2, 8, 2, L_max, 64, [rng.randint(1, L_max), rng.randint(1, L_max)], torch_seed(rng)
    )
    grouped = checks.run_decode(q, k, v, lens, num_splits=5)[:2]
    repeated = checks.run_decode(
        q, k.repeat_interleave(4, dim=1).contiguous(), v.repeat_interleave(4, dim=1).contiguous(), lens, num_splits=5
    )[:2]
    require(
        all(torch.equal(a, b) for a, b in zip(grouped, repeated)),
        "mismatch",
        "O or LSE with 8 query heads over 2 KV heads differs from the same attention with the KV heads repeated: "
        "query head h must read KV head h / (H / H_kv) of its own batch row",
        "grouped-query decode reads the wrong K/V head",
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_repeatable_bitwise)")
def test_repeatable_bitwise(seed):
    rng = rng_for(seed, "repeat")
    L_max = rng.randint(4000, 6000)
    q, k, v, lens = checks.decode_inputs(2, 8, 2, L_max, 128, [L_max - 1, L_max // 2], torch_seed(rng))
    assert_repeatable(
        lambda: checks.kernels.decode_attention(q, k, v, lens),
        10,
        "O or LSE changed between identical runs: a race (a missing __syncthreads?) or an order of "
        "additions that depends on timing",
    )


@pytest.mark.reproduce(f"{PUBLIC} (test_cuda_graph_replays_at_growing_lengths)")
def test_cuda_graph_replays_at_growing_lengths(seed):
    rng = rng_for(seed, "graph")
    L_max = rng.randint(2000, 3500)
    grown = sorted({1, 2, 31, 32, 33, 64, 65, rng.randint(100, 999), rng.randint(1000, L_max - 1), L_max - 1, L_max})
    steps = [[length, max(1, length // rng.randint(2, 5))] for length in grown]
    checks.check_graph_replays(2, 8, 2, L_max, rng.choice((32, 64, 128)), steps, torch_seed(rng), TOL)


@pytest.mark.structure
@pytest.mark.reproduce(f"{PUBLIC} (test_no_scores_in_local_memory)")
def test_no_scores_in_local_memory():
    check_local_memory("t6_decode_attention.cu", ("t6",))


@pytest.mark.deadline(600)
@pytest.mark.reproduce("make sanitize T=t6")
@pytest.mark.parametrize("tool", sanitizer_tools(memcheck_s=2, racecheck_s=3))
def test_compute_sanitizer(tool):
    check_sanitizer("t6", tool)


# ================================================================================== the cache (in the worker)


def check_buffer(actual, expected: torch.Tensor, written: torch.Tensor, name: str) -> None:
    """A cache buffer after the writes: the written (row, position) entries hold the new values, all else the
    fill it started with."""
    require(
        isinstance(actual, torch.Tensor) and tuple(actual.shape) == tuple(expected.shape),
        "shape",
        f"{name}: expected shape {tuple(expected.shape)}, got {tuple(getattr(actual, 'shape', ()))}",
        f"{name} has the wrong shape (the buffers are (B_max, H_kv, L_max, d))",
    )
    actual = actual.cpu()
    same = actual == expected
    require(
        bool(same[written].all()),
        "mismatch",
        f"{name}: {int((~same[written]).sum())} written elements differ from the new keys/values. {UPDATE_HINT}",
        f"{name}: the positions written do not hold the new keys/values (written at other positions or rows?)",
    )
    require(
        bool(same[~written].all()),
        "mismatch",
        f"{name}: {int((~same[~written]).sum())} elements outside the written rows and positions changed. "
        f"{UPDATE_HINT}",
        f"{name}: elements outside the written rows and positions changed",
    )


def check_lengths(report: dict, expected: int, device: str, when: str) -> None:
    lengths = report.get("lengths")
    require(
        isinstance(lengths, torch.Tensor)
        and tuple(lengths.shape) == (1,)
        and lengths.dtype in (torch.int32, torch.int64),
        "shape",
        f"{when}: the cache's `lengths` must be a (1,) int32/int64 tensor, got {report.get('lengths_dtype')} "
        f"{tuple(getattr(lengths, 'shape', ()))}",
        "the cache's `lengths` is not a (1,) int32/int64 tensor",
    )
    require(
        torch.device(report["lengths_device"]).type == torch.device(device).type,
        "structure",
        f"{when}: `lengths` is on {report['lengths_device']}, the cache on {device}: the decode kernel reads it "
        "there (computing it on the host is a sync per token)",
        "`lengths` left the cache's device: the decode kernel reads it on the GPU",
    )
    require(
        int(lengths[0]) == expected,
        "mismatch",
        f"{when}: lengths is {lengths.tolist()}, expected [{expected}] (the last position written + 1). {UPDATE_HINT}",
        "lengths is not the last position written + 1",
    )


def odd_positions(rng: random.Random, low: int, high: int, count: int) -> list[int]:
    """``count`` sorted odd positions in [low, high), no two consecutive."""
    return sorted(rng.sample(range(low | 1, high, 4), count))


@pytest.mark.cpu
@pytest.mark.reproduce(
    f"{PUBLIC} (test_update_writes_at_the_given_positions_only, test_single_token_writes_grow_the_length)"
)
def test_update_writes_at_the_given_positions_only(seed, devices):
    rng = rng_for(seed, "update")
    B_max = rng.randint(3, 4)
    B = rng.randint(2, B_max - 1)  # rows B .. B_max - 1 are never written
    H_kv, d, L_max = rng.choice((1, 2, 4)), rng.choice((8, 16, 32)), rng.randint(60, 100)
    first = odd_positions(rng, 1, L_max // 2, rng.randint(3, 5))  # a chunk, odd and spread out
    later = odd_positions(rng, first[-1] + 2, L_max, 4)
    plan = [(B, first), (B, later[:1]), (B, later[1:3]), (1, later[3:])]  # the last write: one row only
    gen = torch.Generator().manual_seed(torch_seed(rng))
    steps = [
        (
            torch.tensor(positions),
            torch.randn(b, H_kv, len(positions), d, generator=gen),
            torch.randn(b, H_kv, len(positions), d, generator=gen),
        )
        for b, positions in plan
    ]
    expected = [torch.full((B_max, H_kv, L_max, d), SENTINEL) for _ in range(2)]
    written = torch.zeros(B_max, H_kv, L_max, d, dtype=torch.bool)
    snapshots = []
    for (b, positions), (_, k, v) in zip(plan, steps):
        for buffer, new in zip(expected, (k, v)):
            buffer[:b, :, positions] = new
        written[:b, :, positions] = True
        snapshots.append([buffer[:b].clone() for buffer in expected])
    for device in devices:
        moved = [(pos.to(device), k.to(device), v.to(device)) for pos, k, v in steps]
        result = student().update_scenario(B_max, L_max, H_kv, d, SENTINEL, moved)
        for i, ((b, positions), report, snapshot) in enumerate(zip(plan, result["steps"], snapshots)):
            when = f"write {i + 1} ({device}, {len(positions)} position(s), batch {b})"
            for name, returned, want in (("k", report["k_all"], snapshot[0]), ("v", report["v_all"], snapshot[1])):
                require(
                    isinstance(returned, torch.Tensor) and tuple(returned.shape) == tuple(want.shape),
                    "shape",
                    f"{when}: update must return the first B rows of the {name} buffer, shape "
                    f"{tuple(want.shape)}; got {tuple(getattr(returned, 'shape', ()))}",
                    "update does not return the first B rows of the buffers, (B, H_kv, L_max, d)",
                )
                require(
                    torch.equal(returned.cpu(), want),
                    "mismatch",
                    f"{when}: the {name} rows update returned differ from the buffer after the write. {UPDATE_HINT}",
                    "what update returns is not the buffers' first B rows after the write",
                )
            require(
                report["views"],
                "structure",
                f"{when}: update returned copies; return views of the buffers "
                "(the decode kernel and a captured graph read the buffers themselves)",
                "update returns copies, not views of the cache's buffers",
            )
            check_lengths(report, positions[-1] + 1, device, when)
        check_buffer(result["k_cache"], expected[0], written, f"k_cache ({device})")
        check_buffer(result["v_cache"], expected[1], written, f"v_cache ({device})")


def dispatch_plan(rng: random.Random) -> tuple[dict, list]:
    """A batch of 2 in a cache of 3 rows: a prompt, two decoded tokens, a second prompt chunk after them, two more
    tokens; (first, last, kv_len) per step, kv_len None for steps decoded as in a captured graph."""
    H_kv = rng.choice((1, 2))
    shape = {"B_max": 3, "B": 2, "H_kv": H_kv, "H": H_kv * rng.choice((1, 2, 4)), "d": rng.choice((32, 64))}
    prompt, chunk = rng.randint(3, 9), rng.randint(2, 6)
    p = prompt
    steps = [(0, p, p), (p, p + 1, p + 1), (p + 1, p + 2, None), (p + 2, p + 2 + chunk, p + 2 + chunk)]
    p += 2 + chunk
    steps += [(p, p + 1, None), (p + 1, p + 2, p + 2)]
    shape["L_max"] = p + 2 + rng.randint(3, 12)
    # Never 1/sqrt(d), the kernels' default: a cache that does not pass the model's scale on gets other values.
    shape["scale"] = rng.choice((0.5, 2.0, 3.0)) / math.sqrt(shape["d"])
    shape["shift_seed"] = torch_seed(rng)  # the stand-in kernels' shift of their answers (this process's only)
    return shape, steps


def run_dispatch(seed: int, device: str, label: str):
    """The plan's steps through the student's ``attend`` on a fresh cache, one worker call each, the kernels
    stand-ins served by this process: per step, the output and this process's record of the kernel calls."""
    rng = rng_for(seed, label)
    shape, steps = dispatch_plan(rng)
    gen = torch.Generator().manual_seed(torch_seed(rng))
    total = steps[-1][1]
    q = torch.randn(shape["B"], shape["H"], total, shape["d"], generator=gen)
    k = torch.randn(shape["B"], shape["H_kv"], total, shape["d"], generator=gen)
    v = torch.randn(shape["B"], shape["H_kv"], total, shape["d"], generator=gen)
    student().dispatch_setup(shape["B_max"], shape["L_max"], shape["H_kv"], shape["d"], device)
    reports = []
    for first, last, kv_len in steps:
        chunk = [x[:, :, first:last].contiguous().to(device) for x in (q, k, v)]  # fresh tensors, as the model's are
        result = student().call(
            "dispatch_step",
            stand_in_kernels(shape["shift_seed"]),
            *chunk,
            torch.arange(first, last, device=device),
            shape["scale"],
            kv_len,
            device=device,
        )
        reports.append({"out": result.value, "calls": result.calls or []})
    return shape, steps, (q, k, v), {"steps": reports}


def kernel_calls(report: dict) -> list[dict]:
    return [c for c in report["calls"] if c.get("op") != "decode_workspace"]


def check_scale(call: dict, scale: float, where: str) -> None:
    """The kernel call recorded the scale the model gave ``attend``."""
    given = call.get("scale")
    require(
        given is not None and math.isclose(given, scale, rel_tol=1e-6),
        "mismatch",
        f"{where}: the kernel got scale {given}, the model gave attend {scale}: pass scale= on to the kernel",
        "a kernel call does not get the softmax scale the model passes to attend",
    )


@pytest.mark.cost(3)
@pytest.mark.cpu
@pytest.mark.reproduce(f"{PUBLIC} (test_prefill_and_decode_go_to_their_kernels)")
def test_prefill_and_decode_go_to_their_kernels(seed, devices):
    # The stand-in kernels answer with attention shifted per query head by a vector of this check's own (run_dispatch):
    # attend must return what its kernel returned.
    for device in devices:
        shape, steps, (q, k, v), result = run_dispatch(seed, device, "dispatch")
        shift = output_shift(shape["shift_seed"], shape["H"], shape["d"])[None, :, None, :]
        for (first, last, _), report in zip(steps, result["steps"]):
            T = last - first
            where = f"positions {first}..{last - 1} ({device})"
            calls = kernel_calls(report)
            if T == 1:
                ok = len(calls) == 1 and calls[0].get("op") == "decode_attention"
                require(
                    ok,
                    "structure",
                    f"one token at {where}: expected one call of kernels.decode_attention, got "
                    f"{[c.get('op') for c in calls]}. {DISPATCH_HINT}",
                    "a decode step does not make exactly one call of the t6 kernel (kernels.decode_attention)",
                )
                call = calls[0]
                require(
                    call.get("capacity") == shape["L_max"],
                    "structure",
                    f"one token at {where}: decode_attention must get the cache's whole buffers (capacity "
                    f"{shape['L_max']}), got a capacity of {call.get('capacity')}. {DISPATCH_HINT}",
                    "a decode step does not pass the cache's whole buffers to the t6 kernel "
                    "(slicing by the position cannot be captured in a CUDA graph)",
                )
                require(
                    set(call.get("lengths", [])) == {last},
                    "mismatch",
                    f"one token at {where}: decode_attention got lengths {call.get('lengths')}, expected {last}",
                    "a decode step gives the t6 kernel the wrong length (the last position + 1)",
                )
                require(
                    torch.device(call.get("lengths_device", "cpu")).type == torch.device(device).type,
                    "structure",
                    f"one token at {where}: the lengths tensor is on {call.get('lengths_device')}; the kernel reads "
                    "it on the cache's device",
                    "a decode step's lengths tensor is not on the cache's device",
                )
                check_scale(call, shape["scale"], f"one token at {where}")
            else:
                ok = len(calls) == 1 and calls[0].get("op") == "flash_attention"
                require(
                    ok,
                    "structure",
                    f"a chunk of {T} tokens at {where}: expected one call of "
                    f"kernels.flash_attention, got {[c.get('op') for c in calls]}. {DISPATCH_HINT}",
                    "a prefill does not make exactly one call of the t5 kernel (kernels.flash_attention)",
                )
                call = calls[0]
                require(
                    call.get("causal") is True,
                    "structure",
                    f"a chunk of {T} tokens at {where}: flash_attention was called with causal=False",
                    "a prefill calls flash_attention without causal=True",
                )
                require(
                    call.get("keys") == last and call.get("queries") == T,
                    "structure",
                    f"a chunk of {T} tokens at {where}: flash_attention got {call.get('queries')} queries over "
                    f"{call.get('keys')} keys; expected {T} over positions 0..{last - 1} ({last} keys). "
                    f"{DISPATCH_HINT}",
                    "a prefill's keys are not exactly the positions 0 .. input_pos[-1]",
                )
                check_scale(call, shape["scale"], f"a chunk of {T} tokens at {where}")
            expected, _ = reference_attention(
                q[:, :, first:last], k[:, :, :last], v[:, :, :last], causal=True, scale=shape["scale"]
            )
            expected = expected + shift  # what the stand-in kernel returned
            out = report.get("out")
            require(
                isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(expected.shape),
                "shape",
                f"attend at {where}: expected O of shape {tuple(expected.shape)}, got "
                f"{tuple(getattr(out, 'shape', ()))}",
                "attend returns the wrong shape (B, H, T, d)",
            )
            assert_close(
                out,
                expected,
                **TOL,
                name=f"attend ({'decode' if T == 1 else 'prefill'}, {device})",
                layout="row, head, token, dim",
                hint=f"{DISPATCH_HINT} {KERNEL_OUTPUT_HINT}",
            )


@pytest.mark.cpu
@pytest.mark.structure
@pytest.mark.reproduce(f"{PUBLIC} (test_decode_keeps_one_workspace)")
def test_decode_keeps_one_workspace(seed, devices):
    for device in devices:
        _, steps, _, result = run_dispatch(seed, device, "workspace")
        decode_reports = [r for (first, last, _), r in zip(steps, result["steps"]) if last - first == 1]
        made = sum(1 for r in decode_reports for c in r["calls"] if c.get("op") == "decode_workspace")
        require(
            made <= 1,
            "structure",
            f"{made} decode workspaces made over {len(decode_reports)} decode steps "
            f"({device}): make it once and keep it (a CUDA graph replays the buffers it captured)",
            "a decode workspace is made at every step instead of once",
        )


@cache
def reference_random_model(preset: str, seed: int, device: str):
    from assignment.model.presets import random_model

    return random_model(preset, seed=seed, device=device)


@pytest.mark.cpu
@pytest.mark.cost(20)
@pytest.mark.reproduce(f"{PUBLIC} (test_model_prefill_then_decode_equals_one_pass_on_cpu)")
def test_model_prefill_then_decode_equals_one_pass_on_cpu(seed, devices):
    # The kit's reference attention over the student's cache (its update only), on a small random model.
    rng = rng_for(seed, "tiny-model")
    model_seed, prompt, new = torch_seed(rng), rng.randint(4, 12), rng.randint(6, 12)
    for device in devices:
        model = reference_random_model("llama-tiny", model_seed, device)
        tokens = torch.randint(
            0, model.vocab_size, (2, prompt + new), generator=torch.Generator().manual_seed(model_seed)
        ).to(device)
        with torch.no_grad():
            full = model(tokens)
        logits = student().cpu_model_scenario(
            "llama-tiny", model_seed, tokens, prompt, prompt + new + rng.randint(0, 9)
        )
        compare_logits(logits, full, prompt - 1, f"a small random model, reference attention ({device})")


def shifted_model(preset: str, seed: int, shift: torch.Tensor):
    """The kit's random model (on the GPU) whose every attention output is shifted per query head by ``shift``
    (H, d), as stand-in kernels with that shift shift theirs: o_proj(O + shift) = o_proj(O) + W_o shift, a bias of
    the output projection."""
    from assignment.model.presets import random_model

    model = random_model(preset, seed=seed, device="cuda")
    with torch.no_grad():
        for layer in model.layers:
            projection = layer.self_attn.o_proj
            moved = projection.weight @ shift.reshape(-1).to(projection.weight)
            bias = moved if projection.bias is None else projection.bias + moved
            projection.bias = torch.nn.Parameter(bias, requires_grad=False)
    return model


@pytest.mark.cost(10)
@pytest.mark.reproduce(f"{PUBLIC} (test_model_logits_follow_what_your_kernels_return)")
def test_model_logits_follow_what_the_kernels_return(seed):
    # The small random model with the t6 attention (the cache's attend, on the GPU) over stand-in kernels served from
    # here, which shift every head's output by a vector of this check's own: the logits must move by exactly that
    # shift. A cache that launches its kernels but returns attention it computed beside them does not move them.
    rng = rng_for(seed, "shifted-model")
    model_seed, shift_seed, prompt, new = torch_seed(rng), torch_seed(rng), rng.randint(4, 12), rng.randint(4, 8)
    model = reference_random_model("llama-tiny", model_seed, "cuda")
    tokens = torch.randint(
        0, model.vocab_size, (2, prompt + new), generator=torch.Generator().manual_seed(model_seed)
    ).cuda()
    result = student().call(
        "stand_in_model_scenario",
        stand_in_kernels(shift_seed),
        "llama-tiny",
        model_seed,
        tokens,
        prompt,
        prompt + new + rng.randint(0, 9),
        device="cuda",
    )
    config = model.config
    with torch.no_grad():
        full = shifted_model(
            "llama-tiny", model_seed, output_shift(shift_seed, config.num_attention_heads, config.head_dim)
        )(tokens)
    what = "a small random model on stand-in kernels that shift their answers"
    compare_logits(result.value, full, prompt - 1, what, hint=KERNEL_OUTPUT_HINT)


def compare_logits(steps, full: torch.Tensor, first_position: int, what: str, hint: str = LOGITS_HINT) -> None:
    require(
        isinstance(steps, list) and len(steps) == full.shape[1] - first_position,
        "shape",
        f"{what}: expected {full.shape[1] - first_position} rows of logits",
        f"{what}: missing logits",
    )
    for i, step in enumerate(steps):
        position = first_position + i
        require(
            isinstance(step, torch.Tensor) and tuple(step.shape) == tuple(full[:, position].shape),
            "shape",
            f"{what}: the logits at position {position} have shape {tuple(getattr(step, 'shape', ()))}",
            f"{what}: logits of the wrong shape",
        )
        assert_close(step, full[:, position], **LOGITS, name=f"{what}: logits", layout="row, vocabulary id", hint=hint)


# ---------------------------------------------------------------------------------- on the GPU, the shipped model


@lru_cache(maxsize=1)
def shipped_model():
    from assignment.model import load_checkpoint

    return load_checkpoint(device="cuda", max_seq_len=1).model


def full_pass(tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return shipped_model()(tokens)


def checkpoint_tokens(rng: random.Random, batch: int, prompt: int, new: int) -> torch.Tensor:
    vocab = shipped_model().vocab_size
    gen = torch.Generator().manual_seed(torch_seed(rng))
    return torch.randint(0, vocab, (batch, prompt + new), generator=gen).cuda()


def checkpoint_run(tokens: torch.Tensor, chunks: list, max_seq_len: int, what: str, graph: bool = False) -> dict:
    try:
        return student().checkpoint_scenario(tokens, chunks, max_seq_len, graph=graph)
    except WorkerFailure as exc:
        scenario_failure(exc, what)


def check_checkpoint_run(result: dict, tokens: torch.Tensor, chunks: list, what: str, eager: bool = True) -> None:
    """Logits against one full pass; eagerly, every layer of every step must also have launched its kernel (the
    worker's kit wrappers count them: right logits from PyTorch maths are not the task)."""
    if eager:
        layers = shipped_model().config.num_hidden_layers
        launches = result.get("launches") or {}
        steps = tokens.shape[1] - chunks[-1][1]
        require(
            launches.get("decode_attention", 0) >= steps * layers,
            "structure",
            f"{what}: {launches.get('decode_attention', 0)} launches of the t6 kernel for {steps} decode steps of "
            f"{layers} layers. {DISPATCH_HINT}",
            "decode steps of the model do not run the t6 kernel",
        )
        require(
            launches.get("flash_attention", 0) >= len(chunks) * layers,
            "structure",
            f"{what}: {launches.get('flash_attention', 0)} launches of the t5 kernel for {len(chunks)} prefill "
            f"chunk(s) of {layers} layers. {DISPATCH_HINT}",
            "the model's prefill does not run the t5 kernel",
        )
    full = full_pass(tokens)
    prefill = result.get("prefill") or []
    require(len(prefill) == len(chunks), "shape", f"{what}: missing prefill logits", f"{what}: missing logits")
    for (_, last), logits in zip(chunks, prefill):
        compare_logits([logits], full[:, :last], last - 1, f"{what}, prefill to position {last - 1}")
    compare_logits(result.get("decode"), full, chunks[-1][1], f"{what}, decoding")


@pytest.mark.reproduce(
    f"{PUBLIC} (test_model_on_your_kernels_equals_one_pass, test_shipped_checkpoint_generates_the_same_text)"
)
def test_shipped_checkpoint_prefill_then_decode_equals_one_pass(seed):
    rng = rng_for(seed, "checkpoint")
    prompt, new = rng.randint(40, 160), rng.randint(24, 48)
    tokens = checkpoint_tokens(rng, 1, prompt, new)
    what = "the shipped checkpoint on your cache and kernels"
    result = checkpoint_run(tokens, [(0, prompt)], prompt + new + rng.randint(0, 40), what)
    check_checkpoint_run(result, tokens, [(0, prompt)], what)


@pytest.mark.cost(10)
@pytest.mark.reproduce(f"{PUBLIC} (test_model_on_your_kernels_equals_one_pass)")
def test_batch_of_two_prompts(seed):
    rng = rng_for(seed, "batch")
    prompt, new = rng.randint(30, 120), rng.randint(16, 32)
    tokens = checkpoint_tokens(rng, 2, prompt, new)  # two different prompts, decoded side by side
    what = "a batch of 2 prompts on your cache and kernels"
    result = checkpoint_run(tokens, [(0, prompt)], prompt + new + rng.randint(0, 40), what)
    check_checkpoint_run(result, tokens, [(0, prompt)], what)


@pytest.mark.reproduce(f"{PUBLIC} (test_chunked_prefill_equals_one_prefill)")
def test_chunked_prefill_equals_one_prefill(seed):
    rng = rng_for(seed, "chunks")
    prompt, new = rng.randint(60, 200), rng.randint(8, 16)
    split = rng.randint(10, prompt - 10)
    tokens = checkpoint_tokens(rng, 1, prompt, new)
    what = "a prompt prefilled in two chunks"
    chunks = [(0, split), (split, prompt)]
    result = checkpoint_run(tokens, chunks, prompt + new + rng.randint(0, 40), what)
    check_checkpoint_run(result, tokens, chunks, what)


@pytest.mark.structure  # a step that cannot be captured is timed eagerly: slower, and not barred from timing
@pytest.mark.reproduce(f"{PUBLIC} (test_decode_step_replays_in_a_cuda_graph)")
def test_decode_step_replays_in_a_cuda_graph(seed):
    rng = rng_for(seed, "graph-model")
    prompt, new = rng.randint(20, 100), rng.randint(32, 64)
    tokens = checkpoint_tokens(rng, 1, prompt, new)
    max_seq_len = prompt + new + rng.randint(0, 40)
    eager = checkpoint_run(tokens, [(0, prompt)], max_seq_len, "the eager decode steps")
    replayed = checkpoint_run(
        tokens, [(0, prompt)], max_seq_len, "the decode step captured in a CUDA graph", graph=True
    )
    check_checkpoint_run(eager, tokens, [(0, prompt)], "the eager decode steps")
    check_checkpoint_run(replayed, tokens, [(0, prompt)], "graph replays", eager=False)
    for a, b in zip(replayed.get("decode") or [], eager.get("decode") or []):
        assert_close(
            a,
            b,
            **LOGITS,
            name="a graph replay against the same step run eagerly",
            layout="row, vocabulary id",
            hint="Replays repeat the captured launches: the length must come from a GPU tensor, never from a "
            "Python value computed at capture time.",
        )


# ================================================================================== timing


class WorkerDecoder:
    """The student's decode path of the model timing rule: a session in the worker (assignment.perf.workload.StudentDecoder)."""

    def setup(self, preset: str, seed: int, prompt: torch.Tensor, max_seq_len: int) -> dict:
        info = student().timing_setup(preset, seed, prompt, max_seq_len)
        token = prompt[:, :1].contiguous()
        times = []
        for _ in range(20):  # the worker's per-call overhead, with a timed call's traffic (recorded, not subtracted)
            start = time.perf_counter()
            student().timing_echo(token)
            times.append((time.perf_counter() - start) * 1e3)
        return dict(info, overhead_ms=round(statistics.median(times), 4))

    def step(self, token: torch.Tensor) -> torch.Tensor:
        return student().timing_step(token)

    def close(self) -> None:
        student().worker.stop()  # waits until every process of the sandbox has ended


def measure_settings(rule) -> dict:
    if "model" in rule.shape:  # a 1B model step: ~2 ms replayed, ~50 ms naive
        return {"max_reps": 30, "time_cap_s": 30.0, "student_model": WorkerDecoder()}
    # The decode kernel, ~60 us a call: at the harness's 1% standard error per candidate its ratio moved 2.4% over
    # 11 gradings on an H200; a rep costs about 2 ms here (fresh inputs, the student's every output checked), so a
    # tighter target is cheap.
    return {"min_reps": 40, "max_reps": 600, "rse_target": 0.003, "time_cap_s": 40.0}


def prepare_timing() -> None:
    """The model rule's 1B model and the kit's captured step, built before this checker's turn to time (the grader's
    plugin calls this while other tasks' checks run), and the worker started: its sandbox and torch, no student code
    yet (that runs only once the turn is given: the rule's setup imports the student's file)."""
    common.prepare_timing(TASK, measure_settings)
    student().worker.prestart()


@pytest.mark.perf
@pytest.mark.deadline(300)
@pytest.mark.reproduce("make bench T=t6")
@pytest.mark.parametrize("rule", [pytest.param(r, id=f"rule{i}") for i, r in enumerate(TASK.timing)])
def test_timing(rule, check_record):
    time_rule(TASK, rule, check_record, **measure_settings(rule))
