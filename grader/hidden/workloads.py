"""The graded timing workloads, one per registry timing rule, from each task's code (``timing_workload``).

Shared by the hidden timing tests (student against reference or naive) and the grader's preflight
(the reference alone, against the time the registry recorded for this GPU). Inputs are made on the
GPU from a seed, so every timed call gets fresh ones cheaply; every student output is compared in
full with the reference kernel's output on the same (unmodified) inputs.

t6's model rule times a decode step of a 1B model. The student's cache is Python, which runs only in the
sandboxed worker: the hidden test passes ``student_model`` (a ``StudentDecoder``), whose step is one call to
the worker, timed from here like any candidate (CUDA events on this process's idle stream around a blocking
call: the wall time of the call, the logits crossing as data included; the worker's per-call overhead is
measured and recorded beside it). The naive and reference paths run here, on the same random weights.
"""

from __future__ import annotations

import os

from assignment import tasks
from assignment.kernels import Kernels
from assignment.perf.workload import StudentDecoder, Workload
from assignment.registry import TimingRule


def _base_seed() -> int:
    return int(os.environ.get("KIT_SEED", "0")) * 1_000_003


def reference_kernels() -> Kernels:
    return Kernels("solutions")


def workload(
    task_id: str,
    rule: TimingRule,
    student: Kernels,
    tolerance: dict[str, float],
    *,
    student_model: StudentDecoder | None = None,
) -> Workload:
    make = tasks.code(task_id).timing_workload
    if make is None:
        raise KeyError(f"no timing workload for {task_id} (its code in assignment/tasks/ has no timing_workload)")
    return make(rule, student, reference_kernels(), tolerance, _base_seed(), student_model=student_model)
