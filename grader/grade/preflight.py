"""Grading phase 0: refuse a host that cannot grade what it was asked to, before any submission.

A check that cannot run on a host is never a student's failure, so the host must have everything
the tasks' checks use: a CUDA GPU, nvcc, compute-sanitizer and cuobjdump for the GPU tasks; the
isolation the grading asks for; and a GPU that runs the reference at the speed the timing rubric was
measured at (``reference_ms`` in each timing rule, per GPU model): a busy, throttled or different
GPU would shift every performance score. A GPU model the rubric was not measured on is allowed, with
a note, since the rubric's ratios are measured against the reference on the same GPU.

    python -m grader.grade.preflight [--task t4 ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from dataclasses import dataclass, field

from assignment.cuda.toolchain import hopper_absent
from assignment.registry import Task, load_registry
from grader.grade.config import THEORY, GradeConfig
from grader.grade.runner import gpu_available
from grader.isolation import sandbox

# The reference may run this much slower than the registry's figure before the host is refused.
REFERENCE_SLOWDOWN_LIMIT = 1.25
GPU_TOOLS = {
    "nvcc": "building the CUDA tasks",
    "g++": "the CUDA region rules (read with nvcc's host compiler)",
    "compute-sanitizer": "the memory and race checks",
    "cuobjdump": "the local-memory check of the attention kernels",
}
# cudaDevAttrPageableMemoryAccess: the GPU can read and write ordinary host memory (HMM), the checker's included.
PAGEABLE_MEMORY_ACCESS = 88


@dataclass
class Preflight:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    isolation: str = sandbox.FULL
    # The reference's speed per timing rule: task, rule, gpu, measured_ms, recorded_ms (None: not measured on
    # this GPU model). The class grading compares its GPU workers with these (grader/classroom/batch.py).
    speeds: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def decide_isolation(config: GradeConfig) -> tuple[str, str, str | None]:
    """(level, detail, problem): the isolation to grade with, and a refusal when it is not enough."""
    level, detail = sandbox.best_isolation(config.bwrap)
    if config.isolation == "process":
        level = sandbox.FALLBACK
    if level == sandbox.FULL:
        return level, detail, None
    if config.isolation == "bwrap":
        return level, detail, f"bubblewrap was asked for and cannot run here: {detail}"
    if not config.allow_weak_isolation:
        return (
            level,
            detail,
            (
                f"student Python would run without a sandbox ({detail}): install bubblewrap (apt-get install "
                "bubblewrap), or, for code you trust, grade anyway with GRADE_FLAGS=--allow-weak-isolation "
                "(--allow-weak-isolation on the grader's command line)"
            ),
        )
    return level, detail, None


def isolation_check(tasks: list[Task], config: GradeConfig) -> Preflight:
    """The isolation to grade ``tasks`` with, refused when it is not enough for their Python files or for the
    compiler that builds their CUDA files (nvcc runs in the same kind of sandbox)."""
    level, detail, problem = decide_isolation(config)
    result = Preflight(isolation=level, facts={"isolation": f"{level} ({detail})"})
    if problem and any(f.endswith((".py", ".cu")) for t in tasks for f in t.files):
        result.problems.append(problem.replace("student Python would run", "student Python and nvcc would run"))
    return result


def run_preflight(tasks: list[Task], config: GradeConfig, *, time_reference: bool = True) -> Preflight:
    result = isolation_check(tasks, config)
    if importlib.util.find_spec("pytest_jsonreport") is None:
        result.problems.append("pytest-json-report is not installed (the checker's report format)")
    gpu_tasks = [t for t in tasks if t.needs_gpu]
    if not gpu_tasks:
        return result
    names = ", ".join(t.id for t in gpu_tasks)
    if not gpu_available():
        theory = [THEORY] if load_registry().theory and (not config.tasks or THEORY in config.tasks) else []
        others = " ".join([t.id for t in tasks if not t.needs_gpu] + theory)
        instead = f'grade the others here with TASKS="{others}" (--task on the command line), or ' if others else ""
        result.problems.append(
            f"{names} need{'s' if len(gpu_tasks) == 1 else ''} a CUDA GPU and this host has none: {instead}grade "
            "on a GPU host, or report them as not run with GRADE_FLAGS=--skip-preflight (--skip-preflight)"
        )
        return result
    for tool, why in GPU_TOOLS.items():
        if shutil.which(tool) is None:
            result.problems.append(f"{tool} is not on PATH; it is needed for {why} ({names})")
    import torch

    gpu = torch.cuda.get_device_name()
    result.facts["gpu"] = gpu
    _check_host_memory_reach(result)
    if absent := hopper_absent():  # a Hopper task is reported "not available on this GPU" by its grading
        hopper = [t.id for t in gpu_tasks if t.needs_hopper]
        if hopper:
            result.notes.append(f"{', '.join(hopper)} not available on this GPU: {absent}")
        gpu_tasks = [t for t in gpu_tasks if not t.needs_hopper]
    if time_reference and not result.problems:
        _check_reference_speed(gpu_tasks, gpu, result)
    return result


def _check_host_memory_reach(result: Preflight) -> None:
    """Student kernels run in the checker's process (device code only, launched by the kit's host code). Where the
    driver lets a GPU dereference any host address (HMM, pageable memory access), a kernel could in principle reach
    the checker's own memory: say so, with the remedy."""
    from assignment.cuda.wrappers import _cudart

    runtime = _cudart()
    if runtime is None:
        return
    import ctypes

    import torch

    value = ctypes.c_int(-1)
    if runtime.cudaDeviceGetAttribute(ctypes.byref(value), PAGEABLE_MEMORY_ACCESS, torch.cuda.current_device()) != 0:
        return
    result.facts["pageable memory access"] = bool(value.value)
    if value.value:
        result.notes.append(
            "this GPU can access pageable host memory (HMM): a student kernel could address the "
            "checker's memory directly; on a grading host, load nvidia_uvm with uvm_disable_hmm=1 "
            "(grader/notes/isolation.md)"
        )


def _check_reference_speed(tasks: list[Task], gpu: str, result: Preflight) -> None:
    from assignment.kernels import Kernels
    from assignment.perf.timing import measure
    from grader.hidden.workloads import workload

    for task in tasks:
        for rule in task.timing:
            recorded = rule.reference_ms.get(gpu)
            if recorded is None:
                result.speeds.append(
                    {"task": task.id, "rule": rule.name, "gpu": gpu, "measured_ms": None, "recorded_ms": None}
                )
                result.notes.append(
                    f"{task.id} '{rule.name}': the rubric was not measured on {gpu} (it was on "
                    f"{', '.join(rule.reference_ms) or 'no GPU on record'}); ratios still apply"
                )
                continue
            work = workload(task.id, rule, Kernels("solutions"), task.timed_tolerance())
            timed = measure(
                {"reference": work.reference},
                work.make_inputs,
                min_reps=5,
                max_reps=15,
                time_cap_s=5.0,
                enforce_floor=False,
            )["reference"]
            slowdown = timed.median_ms / recorded
            result.speeds.append(
                {
                    "task": task.id,
                    "rule": rule.name,
                    "gpu": gpu,
                    "measured_ms": timed.median_ms,
                    "recorded_ms": recorded,
                }
            )
            result.facts[f"{task.id} {rule.name}"] = f"reference {timed.median_ms:.3f} ms (registry {recorded} ms)"
            if slowdown > REFERENCE_SLOWDOWN_LIMIT:
                result.problems.append(
                    f"{task.id} '{rule.name}': the reference takes {timed.median_ms:.3f} ms here, {slowdown:.2f}x the "
                    f"{recorded} ms the rubric was measured with on {gpu}: the GPU is busy, throttled or not the same"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", default=[])
    parser.add_argument("--no-timing", action="store_true", help="skip timing the reference")
    args = parser.parse_args(argv)
    registry = load_registry()
    tasks = [registry.task(t) for t in args.task] or list(registry.available)
    result = run_preflight(tasks, GradeConfig(tasks=tuple(args.task)), time_reference=not args.no_timing)
    for key, value in result.facts.items():
        print(f"{key}: {value}")
    for note in result.notes:
        print(f"note: {note}")
    for problem in result.problems:
        print(f"PROBLEM: {problem}")
    print("preflight " + ("passed" if result.ok else "FAILED"))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
