"""What every hidden suite shares: its cases for this grading, the sanitizer, local-memory and timing checks.

Hidden checks are the public checks' kinds on more shapes and seeds. Each failure raises a
``CheckFailure`` with its kind, so the grader can tell a student what went wrong without the inputs.
"""

from __future__ import annotations

import shutil

import pytest

from assignment.checks import require
from assignment.commands import sanitize as sanitize_command
from assignment.cuda import sanitize
from assignment.kernels import Kernels
from assignment.pytest_plugin import grading_seed
from assignment.registry import Task
from assignment.testing import local_memory_of
from grader.hidden.workloads import workload
from grader.isolation.client import stop_all


def cases(task: Task) -> list:
    """The task's hidden shapes for this grading (fixed edge cases, then shapes drawn from the seed)."""
    return [pytest.param(shape, id=f"case{i}") for i, shape in enumerate(task.hidden_shapes(grading_seed()))]


def sanitizer_tools(memcheck_s: float, racecheck_s: float) -> list:
    """The sanitizer checks' parameters, each with its cost on the reference (seconds, about): the grader deals
    the checks to its checker processes by cost, so the slowest ones run side by side (grader/grade/checker_plugin.py)."""
    return [
        pytest.param("memcheck", marks=pytest.mark.cost(memcheck_s)),
        pytest.param("racecheck", marks=pytest.mark.cost(racecheck_s)),
    ]


def check_sanitizer(task_id: str, tool: str) -> None:
    source = sanitize_command.source_of(task_id)
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on PATH on this host")
    result = sanitize.run(sanitize_command.sanitized_code(task_id).sanitize, tool, source)
    require(
        result.ok,
        "memory_error",
        f"compute-sanitizer --tool {tool} reported errors:\n{result.output[-2500:]}",
        f"compute-sanitizer --tool {tool} found {'races' if tool == 'racecheck' else 'memory errors'}",
    )


def check_local_memory(filename: str, tasks: tuple[str, ...]) -> None:
    used, limit = local_memory_of(filename, tasks)
    require(
        used <= limit,
        "structure",
        f"a kernel uses {used} bytes of local memory per thread (limit {limit}): scores or rows kept per "
        "thread in local memory are the matrix the task must not build",
        f"a kernel keeps {used} bytes per thread in local memory (limit {limit})",
    )


_prepared: dict[str, object] = {}  # rule name -> its workload, built by prepare_timing


def prepare_timing(task: Task, settings_of) -> None:
    """Every timing rule's workload of ``task`` built now, the checker's side only (inputs, the baseline: t6's model
    and its captured step): the grader's plugin calls a suite's ``prepare_timing`` before its checker waits for its
    turn, while other tasks' checks still run. The student's own process starts only in ``Workload.time``.
    ``settings_of(rule)``: the rule's timing settings (``student_model`` among them)."""
    for rule in task.timing:
        student_model = settings_of(rule).get("student_model")
        _prepared[rule.name] = workload(task.id, rule, Kernels(), task.timed_tolerance(), student_model=student_model)


def time_rule(task: Task, rule, record: dict, student_model=None, **measure_kwargs) -> None:
    """Time one registry rule into ``record``; ``student_model``: the student's decode path for t6's model rule
    (assignment.perf.workload.StudentDecoder). How the student's path ran (workload notes) joins the record."""
    record["timing"] = {"rule": rule.name, "metric": rule.metric}  # named even when the timing fails
    # No sandboxed worker that has run student code is alive while this process times (t6's model rule starts its own:
    # one started ahead, which has imported nothing, is kept for it).
    stop_all(keep_unused=True)
    work = _prepared.pop(rule.name, None) or workload(
        task.id, rule, Kernels(), task.timed_tolerance(), student_model=student_model
    )
    record["timing"].update(work.notes)
    work.time(rule, record, **measure_kwargs)
    record["timing"].update(work.notes)
