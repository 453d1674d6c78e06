"""How fast this host runs the checks' reference right now: the factor every deadline of a grading is scaled by.

The registry's deadlines (``[task.grading]``: one check, the whole suite) were set on an unloaded machine. A host
busy with other work (gradings side by side, a class batch's other lanes) runs the same honest code slower, so at
the start of each grading the grader times the checks' own reference, float64 attention on the CPU
(``assignment.testing.reference_attention``, single-threaded as the sandboxed worker runs it), on a fixed input,
and compares it with the time ``GradeConfig.pace_reference_ms`` recorded unloaded. Every deadline is multiplied
by that ratio when it is above 1 (never below: a fast host keeps the registry's deadlines; at most ``MAX_PACE``). A check that still runs
past its deadline is rerun once alone (grader/grade/host_gate.py) before it counts.
"""

from __future__ import annotations

import statistics
import time

PROBE_SHAPE = (1, 4, 384, 384, 64)  # batch, heads, queries, keys, head dim: about 20 ms unloaded
PROBE_REPEATS = 5
# At most this factor: past it a hang would cost minutes per check, and a check that runs past its deadline on so busy
# a host is rerun alone anyway. (Four gradings started together on a 2-core machine measured 4.8-6.6x at their start,
# while each imported PyTorch; their checks then ran at 2-3x.)
MAX_PACE = 4.0


def probe_ms() -> float:
    """The median time of the reference on the probe's input, in milliseconds, on one CPU thread."""
    import torch

    from assignment.testing import reference_attention

    batch, heads, lq, lk, d = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, lq, d, generator=generator)
    k = torch.randn(batch, heads, lk, d, generator=generator)
    v = torch.randn(batch, heads, lk, d, generator=generator)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reference_attention(q, k, v, causal=True)  # warm-up: the first call pays for dispatch set-up
        times = []
        for _ in range(PROBE_REPEATS):
            start = time.perf_counter()
            reference_attention(q, k, v, causal=True)
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times)


def measure(reference_ms: float) -> tuple[float, float]:
    """(the factor deadlines are scaled by, between 1 and MAX_PACE; the probe's time now in ms)."""
    now = probe_ms()
    return min(MAX_PACE, max(1.0, now / reference_ms)), now
