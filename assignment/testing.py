"""Helpers shared by the public and hidden tests: references, comparisons with
messages that teach (max error, where, a hint), and an allocation tracker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from assignment.checks import CheckFailure, require

SENTINEL = 12345.0  # outputs are pre-filled with this so unwritten elements show
GUARD_HINT = (
    "NaN in a product of finite inputs means a read outside an input: the checks place a band of NaN right "
    "before and after every input, so a load past an edge (a K, row or column edge left unguarded) reads NaN."
)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 attention: (O, LSE). Rows that see no key give O = 0, LSE = -inf.

    q is (..., H, Lq, d); k and v are (..., H_kv, Lk, d) with H_kv dividing H (grouped-query attention:
    query head h attends with KV head h // (H // H_kv)), or have no head dimension at all like q.
    """
    qd, kd, vd = q.double(), expand_kv_heads(k, q).double(), expand_kv_heads(v, q).double()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = _causal_masked((qd @ kd.transpose(-2, -1)) * scale, causal)
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    out = weights @ vd
    return out, lse


def _causal_masked(scores: torch.Tensor, causal: bool) -> torch.Tensor:
    """Scores (..., Lq, Lk) with -inf where query i may not see key j (j > i + Lk - Lq: bottom-right aligned)."""
    if not causal:
        return scores
    lq, lk = scores.shape[-2], scores.shape[-1]
    i = torch.arange(lq, device=scores.device)[:, None]
    j = torch.arange(lk, device=scores.device)[None, :]
    return scores.masked_fill(j > i + (lk - lq), float("-inf"))


def expand_kv_heads(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """K or V (..., H_kv, L, d) with each head repeated for the H // H_kv query heads of its group: the
    multi-head layout of q (..., H, Lq, d). A copy; for references, never for the kernels under test."""
    if q.dim() < 3 or x.dim() != q.dim() or x.shape[-3] == q.shape[-3]:
        return x
    heads, kv_heads = q.shape[-3], x.shape[-3]
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"K/V have {kv_heads} heads and q has {heads}: grouped-query attention needs H_kv to divide H")
    return x.repeat_interleave(heads // kv_heads, dim=-3)


def random_qkv(
    batch: int,
    heads: int,
    lq: int,
    lk: int,
    d: int,
    *,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    magnitude: float = 1.0,
    kv_heads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normal random q (batch, heads, lq, d), k and v (batch, kv_heads, lk, d) (never zeros; kv_heads
    defaults to heads); ``magnitude`` scales q to push the logits."""
    kv_heads = heads if kv_heads is None else kv_heads
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, lq, d, generator=gen) * magnitude
    k = torch.randn(batch, kv_heads, lk, d, generator=gen)
    v = torch.randn(batch, kv_heads, lk, d, generator=gen)
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v))


def guarded(t: torch.Tensor, band: int | None = None, fill: float = float("nan")) -> torch.Tensor:
    """``t``'s values in a fresh allocation of their own, between two bands of ``fill`` (NaN).

    A kernel that reads past either end of the tensor reads the band, the same NaN in every run, whatever
    the allocator placed next to the tensor (garbage one run, an unmapped page and an illegal address the
    next): the output shows the bug, and a regrade gives the same points. Each band is as long as the
    tensor and at least 1 MiB (a whole tile of rows past the edge lands in it); the tensor starts 256 bytes
    aligned. Writes past either end of an output made this way are found by ``assert_guards_intact``.
    """
    t = t.contiguous()
    size = t.element_size()
    if band is None:
        band = max(t.numel(), (1 << 20) // size)
    band = -(-band * size // 256) * 256 // size  # whole 256-byte units: the tensor stays aligned
    whole = torch.full((2 * band + t.numel(),), fill, dtype=t.dtype, device=t.device)
    view = whole[band : band + t.numel()].view(t.shape)
    view.copy_(t)
    return view


def _bands(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The elements of ``t``'s allocation before it and after it (the bands ``guarded`` placed there)."""
    storage = t.untyped_storage()
    whole = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (storage.nbytes() // t.element_size(),))
    start = t.storage_offset()
    return whole[:start], whole[start + t.numel() :]


def assert_guards_intact(t: torch.Tensor, name: str, layout: str = "") -> None:
    """``t`` was made by ``guarded``: nothing was written into the NaN bands around it (a write past an edge)."""
    where = f" ({layout})" if layout else ""
    for side, band in zip(("before its first", "after its last"), _bands(t)):
        written = ~torch.isnan(band)
        if bool(written.any()):
            first = int(written.nonzero()[0 if side.startswith("after") else -1])
            offset = first + 1 if side.startswith("after") else band.numel() - first
            raise CheckFailure(
                "out_of_bounds_write",
                f"{name}: {int(written.sum())} elements written outside {name}; the nearest lies {offset} element(s) "
                f"{side} element{where}. Check the bounds of your stores: every thread whose row or column lies "
                "past the edge must skip its store.",
                f"{name}: written outside its bounds",
            )


def _first_bad_index(bad: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.nonzero(bad.reshape(-1))[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(bad.shape)))


@dataclass
class Comparison:
    ok: bool
    message: str
    max_error: float
    kind: str = ""
    summary: str = ""


def compare(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float,
    rtol: float,
    name: str,
    hint: str = "",
    layout: str = "",
) -> Comparison:
    """Compare with a tolerance; -inf must match -inf, NaN never passes.

    The arithmetic runs in float64 on ``actual``'s device (a GPU compares millions of elements in a
    blink); only the verdict and the elements it reports come back."""
    where = f" ({layout})" if layout else ""
    if tuple(actual.shape) != tuple(expected.shape):
        return Comparison(
            False,
            f"{name}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}",
            math.inf,
            "shape",
            f"{name} has the wrong shape",
        )
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(a.device, torch.float64)
    if a.numel() == 0:
        return Comparison(True, "", 0.0)
    nan = torch.isnan(a)
    if bool(nan.any()):
        idx = _first_bad_index(nan)
        return Comparison(
            False,
            f"{name}: {int(nan.sum())} NaN values, the first at index {idx}{where}; expected {e[idx].item():.6g}. "
            f"NaN comes from 0/0, inf/inf or inf - inf: exp(-inf - (-inf)) in a row that sees no key, or an exp() "
            f"that overflowed. {hint}".strip(),
            math.inf,
            "nan",
            f"{name}: {_share(nan)} of the elements are NaN",
        )
    sentinel = a == SENTINEL
    if bool(sentinel.any()):
        idx = _first_bad_index(sentinel)
        return Comparison(
            False,
            f"{name}: {int(sentinel.sum())} elements were never written (still the sentinel {SENTINEL:g}), "
            f"the first at index {idx}{where}. Check the bounds of your loops and of the grid. {hint}".strip(),
            math.inf,
            "unwritten",
            f"{name}: {_share(sentinel)} of the elements were never written",
        )
    both_inf = torch.isinf(a) & torch.isinf(e) & (torch.sign(a) == torch.sign(e))
    err = torch.where(both_inf, torch.zeros_like(a), (a - e).abs())
    err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
    limit = atol + rtol * torch.where(torch.isinf(e), torch.zeros_like(e), e.abs())
    bad = err > limit
    max_error = float(err.max())
    if bool(bad.any()):
        idx = _first_bad_index(bad)
        worst = _first_bad_index(err == err.max())
        return Comparison(
            False,
            f"{name}: {int(bad.sum())} of {bad.numel()} elements out of tolerance (atol={atol:g}, rtol={rtol:g}); "
            f"max abs error {max_error:.3g} at index {worst}{where}; first bad index {idx}: got {a[idx].item():.6g}, "
            f"expected {e[idx].item():.6g}. {hint}".strip(),
            max_error,
            "nan" if math.isinf(max_error) else "mismatch",
            f"{name}: {_share(bad)} of the elements out of tolerance; max abs error {max_error:.3g} "
            f"(allowed: {atol:g} + {rtol:g}·|expected|)",
        )
    return Comparison(True, "", max_error)


def _share(mask: torch.Tensor) -> str:
    """'3.1%' of a boolean mask, never a count (counts would tell the hidden shapes)."""
    return percent(int(mask.sum()), mask.numel())


def percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a plain percentage with about two digits ('3.1%', '42%'), never an exponent; '100%'
    and '0%' only when it is all or none ('>99%', '<0.01%' near them)."""
    if part <= 0 or whole <= 0:
        return "0%"
    if part >= whole:
        return "100%"
    share = 100.0 * part / whole
    if share < 0.01:
        return "<0.01%"
    shown = f"{share:.2g}" if share < 10 else f"{share:.0f}"
    return ">99%" if float(shown) >= 100 or share > 99.5 else f"{shown}%"


def assert_close(actual, expected, *, atol, rtol, name, hint: str | Callable[[], str] = "", layout="") -> float:
    """``compare``, raising CheckFailure on a mismatch. A callable ``hint`` is called only then, so that it can look
    at the output (``edge_case_hint``) before it names a cause."""
    result = compare(
        actual, expected, atol=atol, rtol=rtol, name=name, hint="" if callable(hint) else hint, layout=layout
    )
    if not result.ok:
        message = f"{result.message} {hint()}".strip() if callable(hint) else result.message
        raise CheckFailure(result.kind, message, result.summary)
    return result.max_error


# --------------------------------------------------------------------------- hints that name the cause they see
#
# An edge-case test (huge logits, scores near -200, fp16 inputs) also fails for a bug that has nothing to do with its
# edge case: a missing accumulator rescale fails them all. Its hint must then not blame the edge case. So a hint that
# names a cause is given only when the output shows that cause's symptom, and a code that is wrong on ordinary
# inputs too is sent to the test of ordinary inputs first.


def edge_case_hint(
    hint: str,
    *,
    symptom: Callable[[], bool],
    right_on_ordinary_inputs: Callable[[], bool],
    what: str,
    first: str,
    otherwise: str = "",
) -> Callable[[], str]:
    """The hint of an edge-case check, for ``assert_close`` (worked out only when the check fails). When ``what`` is
    wrong on ordinary inputs of the same shape as well (``right_on_ordinary_inputs()`` is False), the edge case is not
    the cause: the hint sends the student to ``first``, the test of ordinary inputs, and names nothing else. Else
    ``hint``, which names a cause, when the output shows that cause's ``symptom()``, and ``otherwise`` (which names
    none) when it does not."""

    def worked_out() -> str:
        if not right_on_ordinary_inputs():
            return (
                f"{what} is also wrong on ordinary inputs of this shape, so the edge case of this test is not the "
                f"cause: make {first} pass first."
            )
        return hint if symptom() else otherwise

    return worked_out


def passes(check: Callable[[], object]) -> bool:
    """Whether ``check`` (a test's own comparison, e.g. on ordinary inputs) runs without failing."""
    try:
        check()
    except AssertionError:  # CheckFailure included
        return False
    return True


def ordinary_like(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ordinary attention inputs (normal, scores near 0) shaped as q (B, H, Lq, d) and k, v (B, H_kv, Lk, d), in
    their dtype and on their device: what an edge-case test tries to tell its edge case from a bug that breaks
    everything."""
    (batch, heads, lq, d), (kv_heads, lk) = q.shape, k.shape[1:3]
    ordinary = random_qkv(batch, heads, lq, lk, d, seed=7, kv_heads=kv_heads)
    return tuple(t.to(q.device, q.dtype) for t in ordinary)


def attention_edge_hint(
    hint: str,
    symptom: Callable[[], bool],
    run,
    q,
    k,
    v,
    *,
    tol: dict,
    first: str,
    what: str,
    causal: bool = False,
    scale: float | None = None,
    otherwise: str = "",
) -> Callable[[], str]:
    """``edge_case_hint`` for an attention check: ``run(q, k, v)`` (O, or (O, LSE)) on ordinary inputs shaped as
    q, k, v (``ordinary_like``) must match float64 within ``tol`` for the edge case to be the suspect."""

    def right_on_ordinary_inputs() -> bool:
        q2, k2, v2 = ordinary_like(q, k, v)
        out = run(q2, k2, v2)
        expected, _ = reference_attention(q2, k2, v2, causal=causal, scale=scale)
        return compare(out[0] if isinstance(out, tuple) else out, expected, **tol, name="O").ok

    return edge_case_hint(
        hint,
        symptom=symptom,
        right_on_ordinary_inputs=right_on_ordinary_inputs,
        what=what,
        first=first,
        otherwise=otherwise,
    )


def non_finite_where_finite(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Inf or NaN in ``actual`` where ``expected`` is finite: exp() overflowed, or 0/0; for an LSE, -inf in a row that
    sees keys: its running sum stayed 0 (every exp() underflowed)."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    return a.shape == e.shape and bool((torch.isfinite(e) & ~torch.isfinite(a)).any())


def empty_rows(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """A row (the last dimension) that came out all zeros or with a NaN where the expected row has a non-zero
    value: its sum of exponentials was 0, every exp() having underflowed."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.shape != e.shape or a.dim() == 0:
        return False
    lost = (a == 0).all(-1) | torch.isnan(a).any(-1)
    return bool((lost & (e != 0).any(-1)).any())


def same_precision_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """Attention as PyTorch computes it in q's dtype (fp16 or bf16), every intermediate rounded to it: the scores,
    the probabilities and O (the FlashAttention repository's reference without upcasting). Its error against the
    exact answer is what a fair fp16/bf16 kernel is measured by. Rows that see no key give O = 0."""
    kd, vd = expand_kv_heads(k, q), expand_kv_heads(v, q)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = _causal_masked((q @ kd.transpose(-2, -1)) * scale, causal)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row: 0/0 -> 0
    return probs @ vd


def assert_close_to_precision(
    actual, expected, same_precision, *, max_error_ratio: float, atol: float, name, hint="", layout=""
) -> float:
    """``actual`` (fp16/bf16) against the exact ``expected``: every element within ``max_error_ratio`` times the
    largest error of ``same_precision`` (PyTorch in the same dtype, ``same_precision_attention``), plus ``atol``.
    The FlashAttention repository's rule: as accurate as the framework's own low-precision arithmetic, up to a
    factor."""
    baseline = max_abs_error(same_precision, expected)
    bound = max_error_ratio * baseline + atol
    named = f"{name} (allowed: {max_error_ratio:g} x PyTorch's own {actual.dtype} error {baseline:.3g} + {atol:g})"
    return assert_close(actual, expected, atol=bound, rtol=0.0, name=named, hint=hint, layout=layout)


def check_low_precision_attention(kernel, task, q, k, v, causal, scale=None, hint="", what="", minus_inf_rows=None):
    """A tensor-core kernel's (t8's, t9's) O and LSE, outputs pre-filled with SENTINEL, against float64 on the same
    fp16/bf16 inputs: O within ``task``'s precision rule, the LSE within its ``lse`` bound. ``minus_inf_rows``: query
    rows with -inf in dimension 0 (every score -inf), expected to give O = 0, LSE = -inf."""
    out, lse = torch.full_like(q, SENTINEL), torch.full(q.shape[:3], SENTINEL, device=q.device)
    kernel(q, k, v, causal=causal, scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    finite = q
    if minus_inf_rows is not None:  # the references run on finite inputs, those rows are then set by hand
        finite = q.clone()
        finite[:, :, minus_inf_rows, 0] = 0.0
    expected, expected_lse = reference_attention(finite, k, v, causal=causal, scale=scale)
    same = same_precision_attention(finite, k, v, causal=causal, scale=scale)
    if minus_inf_rows is not None:
        expected[:, :, minus_inf_rows], expected_lse[:, :, minus_inf_rows] = 0.0, -math.inf
        same[:, :, minus_inf_rows] = 0.0
    dtype = str(q.dtype).replace("torch.", "")
    assert out.dtype == q.dtype, f"O must keep the input dtype {q.dtype}, got {out.dtype}"
    layout = "batch, head, query, dim"
    assert_close_to_precision(out, expected, same, **task.tol(dtype), name=f"O{what}", layout=layout, hint=hint)
    lse_hint = "LSE = m + ln(l) per query row in natural-log units: m kept in base 2 must be multiplied by ln(2)."
    assert_close(lse, expected_lse, **task.tol("lse"), name=f"LSE{what}", layout="batch, head, query", hint=lse_hint)


def assert_repeatable(run, repeats: int, message: str) -> None:
    """Call ``run`` 1 + ``repeats`` times; every result (a tensor or a tuple of tensors) must be bitwise equal
    to the first. A race in a kernel shows up as a result that moves between identical calls."""

    def as_tuple(result):
        return result if isinstance(result, tuple) else (result,)

    first = as_tuple(run())
    for _ in range(repeats):
        require(all(torch.equal(a, b) for a, b in zip(as_tuple(run()), first)), "not_repeatable", message)


# Local memory one thread of a kernel may use (spills, small arrays). A row of scores kept per thread
# needs 4 bytes per key (16 KB at 4096 keys); the reference attention kernel uses at most 32 bytes.
LOCAL_MEMORY_LIMIT_BYTES = 2048


def local_memory_of(filename: str, tasks: tuple[str, ...]) -> tuple[int, int]:
    """(bytes of local memory per thread of the hungriest kernel in the student's build, the limit).

    Skips the test where cuobjdump is missing; raises NotImplementedError while a TODO is left."""
    import pytest

    from assignment.cuda.compiler import build_module, local_memory_bytes, require_implemented
    from assignment.impl import student_file

    source = student_file(filename)
    require_implemented(source, tasks)
    used = local_memory_bytes(build_module(source, quiet=True).path)
    if used is None:
        pytest.skip("cuobjdump is not on PATH on this host (it ships with the CUDA toolkit)")
    return used, LOCAL_MEMORY_LIMIT_BYTES


def require_python_implemented(filename: str, task: str):
    """The student's Python file (a Path), after raising NotImplementedError while it still holds a stub of
    ``task`` (the starter's ``raise NotImplementedError("tN: ...")``). What counts is the stub, as ``make submit``,
    ``make report`` and the grader count it (``assignment.todos``): a ``# TODO(tN)`` comment left in a finished
    file is only a comment."""
    from assignment.impl import student_file
    from assignment.policy import UndecodableSource, python_text
    from assignment.todos import python_todo_counts

    path = student_file(filename)
    try:
        left = python_todo_counts(python_text(path.read_bytes())).get(task, 0)
    except UndecodableSource:
        return path  # the rules check says what is wrong with it
    if left:
        raise NotImplementedError(
            f"{task}: TODO({task}) in {filename} is not implemented yet ({left} stub{'s' if left > 1 else ''} left)"
        )
    return path


def check_todo_regions(filename: str, tasks: tuple[str, ...]) -> None:
    """The rules the grader applies to a CUDA file's TODO regions before it splices them (public tests)."""
    from assignment.cuda import compiler, regions
    from assignment.cuda.compiler import read_student_text, require_implemented
    from assignment.impl import student_file

    source = student_file(filename)
    require_implemented(source, tasks)
    # Without nvcc only the rules on the regions as written can run (no preprocessor to expand them).
    arch = compiler.preprocess_arch() if compiler.nvcc_path() else None
    problems = regions.check_file(read_student_text(source), tasks, filename, arch=arch)
    assert not problems, (
        f"{filename}: the grader splices only your TODO regions into its own file and rejects "
        "these lines:\n" + "\n".join(str(p) for p in problems)
    )


def max_abs_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    finite = torch.isfinite(e)
    if bool(torch.isnan(a).any()) or bool((~torch.isfinite(a) & finite).any()):
        return math.inf
    return float((a - e)[finite].abs().max()) if bool(finite.any()) else 0.0


def mean_abs_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Mean |actual - expected| over the elements whose expected value is finite (inf when any is not finite)."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    finite = torch.isfinite(e)
    if not bool(torch.isfinite(a[finite]).all()):
        return math.inf
    return float((a - e)[finite].abs().mean()) if bool(finite.any()) else 0.0


class LargestAllocation(TorchDispatchMode):
    """Records the largest tensor any PyTorch operation produces inside the block.

    Used to prove that a tiled implementation never materialises the Lq x Lk
    score matrix: every op output is seen, on the CPU and on a GPU alike.
    """

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.largest_op = ""
        self.largest_shape: tuple[int, ...] = ()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest:
                self.largest, self.largest_op, self.largest_shape = t.numel(), str(func), tuple(t.shape)
        return out


# A student kernel under this fraction of the reference's time is far beyond what the reference
# reaches (0.85x cuBLAS, 1.15x SDPA, ~100% of copy bandwidth): an instructor should look at it.
REVIEW_BELOW_REFERENCE = 0.6


def run_timing_rule(
    rule,
    candidates: dict,
    make_inputs,
    *,
    check=None,
    flops=None,
    bytes_moved=None,
    record: dict | None = None,
    end_student=None,
    **measure_kwargs,
) -> float:
    """Time a registry timing rule and return its value (the ratio or the speedup it scores).

    ``candidates`` holds "student" and, per the rule's metric, "reference" (time_vs_reference:
    student median / reference median, lower is better) or "naive" (speedup_vs_naive: naive
    median / student median). Everything runs interleaved in this process through the one
    timing module, every call on fresh inputs, and every one of the student's timed outputs is
    checked in full by ``check``; ``record`` (the grader's check_record) receives the numbers. With ``end_student``
    (the student's path runs in another process) the student's calls are timed first, then ``end_student`` ends that
    process, then the baseline is timed: not interleaved, but nothing of the student's runs while the baseline is.
    """
    from assignment.perf.timing import gpu_info, measure

    other = "reference" if rule.metric == "time_vs_reference" else "naive"
    chosen = {"student": candidates["student"], other: candidates[other]}
    timing = dict(check=check, check_every=("student",), flops=flops, bytes_moved=bytes_moved, **measure_kwargs)
    if end_student is None:
        results = measure(chosen, make_inputs, **timing)
    else:
        results = measure({"student": chosen["student"]}, make_inputs, **timing)
        end_student()
        results |= measure({other: chosen[other]}, make_inputs, **timing)
    student, baseline = results["student"].median_ms, results[other].median_ms
    value = student / baseline if rule.metric == "time_vs_reference" else baseline / student
    if record is not None:
        info = gpu_info()
        record["timing"] = {
            "rule": rule.name,
            "metric": rule.metric,
            "value": value,
            "student_ms": student,
            f"{other}_ms": baseline,
            "reps": results["student"].reps,
            "gpu": info.get("name", "?"),
        }
        # The student's throughput where the rule knows its work (t3/t4/t5: TFLOP/s; t2/t6: GB/s): the class
        # leaderboard shows it (grader/classroom/class_outputs.py).
        for unit in ("tflops", "gbps"):
            if getattr(results["student"], unit) is not None:
                record["timing"][f"student_{unit}"] = getattr(results["student"], unit)
        if rule.metric == "time_vs_reference" and value < REVIEW_BELOW_REFERENCE:
            record["timing"]["review"] = (
                f"the student's kernel took {value:.2f}x the reference's time, far beyond the reference: worth a look"
            )
    return value
