"""Grading phases 2 and 3 for every task of a submission: each task built and checked as soon as it can be, the
tasks side by side; then the timing checks, one task at a time, each with the GPU to itself.

* **Build, then checks.** Each task is prepared (checked, spliced, built: grader/grade/prepare.py) in a thread of its
  own, and its hidden checks (all but the ``perf`` ones) start the moment its build is done (a Python task's at once),
  while other tasks still build. A task's checks may be dealt round-robin to several checker processes
  (``[task.grading] shards``); at most ``GradeConfig.parallel`` checkers run at once, each with its share of the
  cores' threads. No check's result depends on time, so sharing the CPU and the GPU changes no result.
* **Timing.** Then each task's timing checks, one task after another. Each task's timing checker is started as
  soon as its build is done (its start-up and its CUDA context are paid while the checks run) and waits in its
  first timing check for its turn, a file this process keeps locked (``TimingTurn``). A turn is given only after
  every checker of the checks has ended and every sandboxed worker they started has been killed and waited for
  (grader/grade/checker_process.py): nothing of the student's can keep work queued on the GPU while the checker
  times. The timing checker also takes the host's GPU gate exclusively (grader/grade/host_gate.py), so no other
  grading on this host uses that GPU then.

What each phase took goes into ``grading.json`` (``phases``, and each task's).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from assignment.registry import Task
from grader.grade.checker_plugin import CHECKS, TIMING
from grader.grade.config import GradeConfig
from grader.grade.prepare import PreparedTask
from grader.grade.runner import TaskPhase, TaskRun, TestOutcome, merged, merged_shards
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


def parallel_checkers(config: GradeConfig, wanted: int) -> int:
    """How many checkers run at once: the setting, else all cores but two (most checkers wait on the GPU or on
    their worker), at least 1."""
    width = config.parallel or max(1, len(_cores()) - 2)
    return max(1, min(wanted, width))


def _cores() -> set[int]:
    """The cores this process may run on (a Slurm allocation or a cgroup may give fewer than the host has)."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def has_cpu_checks(task) -> bool:
    """A GPU task with Python files (t6's cache) has checks that run without a GPU: on such a host they run and
    the GPU checks are reported as not run (the preflight refuses such a host for real grading)."""
    return any(name.endswith(".py") for name in task.files)


class _TaskLine:
    """One task's way through the phases: its build, its timing checker waiting for its turn, its checks."""

    def __init__(self, task: Task):
        self.task = task
        self.run: TaskRun | None = None
        self.prepared: PreparedTask | None = None
        self.turn: TimingTurn | None = None
        self.timing: TaskPhase | None = None
        self.build_s = 0.0


def run_tasks(
    tasks: list[Task],
    prepare: Callable[[Task], PreparedTask],
    workdir: Path,
    config: GradeConfig,
    seeds: dict[str, int],
    worker_for: Callable[[PreparedTask], WorkerConfig | None],
    *,
    has_gpu: bool,
    scale: float,
    log=None,
) -> tuple[list[TaskRun], dict[str, float]]:
    """Every task's run, in the order given, and the seconds of the phases (the builds overlap the checks)."""
    log = log or (lambda *a, **k: None)
    lines = [_TaskLine(task) for task in tasks]
    if not lines:  # the theory answers alone
        return [], {}
    width = parallel_checkers(config, sum(task.grading.shards for task in tasks))
    threads = config.threads or max(1, len(_cores()) // width)  # each checker's share of the cores
    builds = threading.Semaphore(len(_cores()))
    started = time.monotonic()
    log(f"building and checking {' '.join(t.id for t in tasks)}: {width} checkers at a time")

    def phase(line: _TaskLine, name: str, **options) -> TaskPhase:
        item = line.prepared
        return TaskPhase(
            item,
            workdir,
            config,
            seeds[item.task.id],
            worker_for(item),
            phase=name,
            scale=scale,
            uses_gpu=has_gpu,
            threads=threads,
            **options,
        )

    def build(line: _TaskLine) -> _TaskLine:
        with builds:
            began = time.monotonic()
            line.prepared = prepare(line.task)
            line.build_s = time.monotonic() - began
        return line

    def check(line: _TaskLine, checkers: ThreadPoolExecutor) -> list:
        """Start ``line``'s timing checker and submit its checks; called from this thread, which outlives every
        process it starts (a checker dies with the thread that started it: PR_SET_PDEATHSIG)."""
        task, item = line.task, line.prepared
        if item.status != "ready":
            line.run = TaskRun(task.id, item.status, item.reason, notes=item.notes)
            return []
        if task.needs_gpu and not has_gpu and not has_cpu_checks(task):
            line.run = TaskRun(task.id, "not_run", "this grading host has no CUDA GPU", notes=item.notes)
            return []
        if has_gpu and task.timing:
            line.turn = TimingTurn(workdir / f"turn-{task.id}")
            line.timing = phase(line, TIMING, turn=line.turn.path)
        shards = min(task.grading.shards, width)
        return [checkers.submit(lambda i: phase(line, CHECKS, shard=(i, shards)).finish(), i) for i in range(shards)]

    phases: dict[str, float] = {}
    try:
        with ThreadPoolExecutor(max_workers=width) as checkers, ThreadPoolExecutor(max_workers=len(lines)) as builders:
            checking = {}
            for done in as_completed([builders.submit(build, line) for line in lines]):
                line = done.result()
                checking[line.task.id] = check(line, checkers)
            for line in lines:
                if checking[line.task.id]:
                    line.run = merged_shards([future.result() for future in checking[line.task.id]])
        phases["build_s"] = max((line.build_s for line in lines), default=0.0)
        phases["checks_s"] = time.monotonic() - started
        began = time.monotonic()
        for line in lines:
            if line.timing is None:
                continue
            timing, line.timing = line.timing, None
            if line.run.status != "ran":
                timing.cancel()
                continue
            log(f"timing {line.task.id}, the GPU to itself")
            line.turn.give()
            line.run = merged(line.run, timing.finish())
        phases["timing_s"] = time.monotonic() - began
    finally:
        for line in lines:
            if line.timing is not None:
                line.timing.cancel()
            if line.turn is not None:
                line.turn.give()
    for line in lines:
        if line.run is not None:
            line.run.phases = {"build": line.build_s, **line.run.phases}
            if not has_gpu and line.run.status == "ran":
                line.run.tests += not_timed(line.task)
    return [line.run for line in lines], phases


def not_timed(task: Task) -> list[TestOutcome]:
    """A task's timing rules on a host without a GPU: not run (their points neither earned nor lost)."""
    return [
        TestOutcome(
            f"{task.id}::test_timing[rule{index}]",
            "skipped",
            "needs a CUDA GPU: this grading host has none",
            is_perf=True,
            timing={"rule": rule.name, "metric": rule.metric},
        )
        for index, rule in enumerate(task.timing)
    ]
