"""Grading phase 3, for every task of a submission: the checks side by side, then the timing, one task at a time.

* **Checks.** Each task's hidden checks (all but the ``perf`` ones) run in a checker process of their own, up to
  ``GradeConfig.parallel`` tasks at once (the CPU's cores and the GPU shared: no check's result depends on time).
* **Timing.** Then each task's timing checks, one task after another, each with the GPU to itself: its checker was
  started with the checks (so its start-up is paid while they run) and waits in its first timing check for its turn,
  a file this process keeps locked (``TimingTurn``). A turn is given only after every checker of the checks phase has
  ended and every sandboxed worker they started has been killed and waited for (grader/grade/checker_process.py):
  nothing of the student's can keep work queued on the GPU while the checker times. The timing checker also takes
  the host's GPU gate exclusively (grader/grade/host_gate.py), so no other grading on this host uses that GPU then.

What each phase took goes into ``grading.json`` (``phases``, and each task's).
"""

from __future__ import annotations

import fcntl
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.grade.checker_plugin import CHECKS, TIMING
from grader.grade.config import GradeConfig
from grader.grade.prepare import PreparedTask
from grader.grade.runner import TaskPhase, TaskRun, merged
from grader.isolation.client import WorkerConfig


class TimingTurn:
    """A task's turn to time: a file locked by the grader from now until ``give``; the task's timing checker locks it
    in its first timing check, so it waits until then."""

    def __init__(self, path: Path):
        self.path = path
        self._handle: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._handle, fcntl.LOCK_EX)

    def give(self) -> None:
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None


def parallel_checkers(config: GradeConfig, count: int) -> int:
    """How many tasks' checks run at once: the setting, else half the cores (a checker and its worker), at least 1."""
    wanted = config.parallel or max(1, (os.cpu_count() or 1) // 2)
    return max(1, min(count, wanted))


def has_cpu_checks(task) -> bool:
    """A GPU task with Python files (t6's cache) has checks that run without a GPU: on such a host they run and
    the GPU checks are reported as not run (the preflight refuses such a host for real grading)."""
    return any(name.endswith(".py") for name in task.files)


def run_tasks(
    prepared: list[PreparedTask],
    workdir: Path,
    config: GradeConfig,
    seeds: dict[str, int],
    workers: dict[str, WorkerConfig | None],
    *,
    has_gpu: bool,
    scale: float,
    log=None,
) -> tuple[list[TaskRun], dict[str, float]]:
    """Every prepared task's run, in the order given, and the seconds of the checks and the timing phases."""
    log = log or (lambda *a, **k: None)
    runs: dict[str, TaskRun] = {}
    runnable: list[PreparedTask] = []
    for item in prepared:
        task = item.task
        if item.status != "ready":
            runs[task.id] = TaskRun(task.id, item.status, item.reason, notes=item.notes)
        elif task.needs_gpu and not has_gpu and not has_cpu_checks(task):
            runs[task.id] = TaskRun(task.id, "not_run", "this grading host has no CUDA GPU", notes=item.notes)
        else:
            runnable.append(item)
    timed = [item for item in runnable if has_gpu and item.task.timing]

    def phase(item: PreparedTask, name: str, turn: Path | None = None) -> TaskPhase:
        task_id = item.task.id
        return TaskPhase(
            item,
            workdir,
            config,
            seeds[task_id],
            workers[task_id],
            phase=name,
            scale=scale,
            uses_gpu=has_gpu,
            turn=turn,
        )

    turns = {item.task.id: TimingTurn(workdir / f"turn-{item.task.id}") for item in timed}
    waiting = {item.task.id: phase(item, TIMING, turns[item.task.id].path) for item in timed}
    phases: dict[str, float] = {}
    started = time.monotonic()
    width = parallel_checkers(config, len(runnable))
    log(f"checks of {' '.join(i.task.id for i in runnable) or 'no task'}, {width} at a time")
    try:
        with ThreadPoolExecutor(max_workers=width) as pool:
            futures = {item.task.id: pool.submit(lambda i: phase(i, CHECKS).finish(), item) for item in runnable}
            checks = {task_id: future.result() for task_id, future in futures.items()}
        phases["checks_s"] = time.monotonic() - started
        started = time.monotonic()
        for item in timed:
            task_id = item.task.id
            if checks[task_id].status != "ran":
                waiting.pop(task_id).cancel()
                continue
            log(f"timing {task_id}, the GPU to itself")
            turns[task_id].give()
            checks[task_id] = merged(checks[task_id], waiting.pop(task_id).finish())
        phases["timing_s"] = time.monotonic() - started
    finally:
        for phase in waiting.values():
            phase.cancel()
        for turn in turns.values():
            turn.give()
    runs.update(checks)
    return [runs[item.task.id] for item in prepared], phases
