"""Grading phases 2 and 3 for every task of a submission: each task built and checked as soon as it can be, the
tasks side by side; then the timing checks, one task at a time, each with the GPU to itself.

* **Build, then checks.** Each task is prepared (checked, spliced, built: grader/grade/prepare.py) in a thread of its
  own, and its hidden checks (all but the ``perf`` ones) start the moment its build is done (a Python task's at once),
  while other tasks still build. A task's checks may be dealt to several checker processes (``[task.grading]
  shards``; by each check's ``cost`` marker, the slowest first, each to the least loaded checker:
  grader/grade/checker_plugin.py); at most ``GradeConfig.parallel`` checkers run at once, each with its share of the
  cores' threads. Where every checker fits at once (the default on a host of 8 cores or more), a CUDA task's checkers
  start with the grading and wait at its build gate, a file this process keeps locked until the build is done: their
  start-up (Python, torch, the collection, the CUDA context) is paid while the task builds; a build that fails stops
  them. No check's result depends on time, so sharing the CPU and the GPU changes no result.
* **Timing.** Then each task's timing checks, one task after another. Each task's timing checker is started with its
  checkers and, once its build is done, builds its side of the workloads (its suite's ``prepare_timing``: t6's 1B
  model), says it is ready and waits in its first timing check for its turn, a file this process keeps locked
  (``HeldFile``). The first turn waits until every timing checker is ready. A turn is given only after
  every checker of the checks has ended and every sandboxed worker they started has been killed and waited for
  (grader/grade/checker_process.py): nothing of the student's can keep work queued on the GPU while the checker
  times. The next turn comes when the timing checker says it is done (its workers ended, its GPU work drained, its
  gates let go: the plugin's ``timing_done``), while its process still exits. The timing checker also takes the host's GPU gate exclusively (grader/grade/host_gate.py), so no other
  grading on this host uses that GPU then.

What each phase took goes into ``grading.json`` (``phases``, and each task's).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path

from assignment.cuda.toolchain import hopper_absent
from assignment.registry import Task
from grader.grade.checker_plugin import CHECKS, TIMING
from grader.grade.config import GradeConfig
from grader.grade.prepare import PreparedTask, kit_companions
from grader.grade.runner import TaskPhase, TaskRun, TestOutcome, merged, merged_shards
from grader.isolation.client import WorkerConfig


READY_S = 120.0  # how long the timing waits for a checker still building its workloads (times the host's pace)


class HeldFile:
    """A file locked by the grader from now until ``give``: a task's turn to time (its timing checker locks it in its
    first timing check) or its build gate (its checkers, started before its build, lock it before their first check)."""

    def __init__(self, path: Path):
        self.path = path
        self._handle: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._handle, fcntl.LOCK_EX)

    def give(self) -> None:
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None


def parallel_checkers(config: GradeConfig, wanted: int) -> int:
    """How many checkers run at once: the setting; else, on a host of 8 cores or more, all of them (most checkers
    wait on the GPU or on their worker); else all cores but two; at least 1."""
    cores = len(_cores())
    width = config.parallel or (wanted if cores >= 8 else cores - 2)
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


def expected_preparation(task: Task, workdir: Path) -> PreparedTask:
    """What preparing ``task`` gives when it succeeds (grader/grade/prepare.py): its spliced files' directory and its
    Python files. Its checkers can start with it before the build ends; ``prepare``'s own result is compared."""
    builds = any(name.endswith(".cu") for name in task.files) or bool(kit_companions(task.id))
    return PreparedTask(
        task,
        impl_dir=workdir / "impl" / task.id if builds else None,
        python_files=[name for name in task.files if name.endswith(".py")],
    )


class _TaskLine:
    """One task's way through the phases: its build, its checkers (started early, waiting at its build gate, where
    they can), its timing checker waiting for its turn."""

    def __init__(self, task: Task):
        self.task = task
        self.run: TaskRun | None = None
        self.prepared: PreparedTask | None = None
        self.turn: HeldFile | None = None
        self.gate: HeldFile | None = None  # held while the task builds, by the checkers started before it ended
        self.early: list[TaskPhase] = []  # those checkers
        self.expected: PreparedTask | None = None  # the preparation they were started for
        self.timing: TaskPhase | None = None
        self.build_s = 0.0

    def cancel(self) -> None:
        """Stop every checker of this task still waiting (at its build gate or for its turn), and give up both."""
        for checker in [*self.early, self.timing]:
            if checker is not None:
                checker.cancel()
        self.early, self.timing = [], None
        for held in (self.turn, self.gate):
            if held is not None:
                held.give()
        self.turn = self.gate = None


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
    wanted = sum(task.grading.shards for task in tasks)
    width = parallel_checkers(config, wanted)
    threads = config.threads or max(1, len(_cores()) // width)  # each checker's share of the cores
    builds = threading.Semaphore(len(_cores()))
    started = time.monotonic()
    # Every checker at once (the host has the width): a task's checkers start now, and pay for their start-up (Python,
    # torch, collection, the CUDA context) while the task builds; they wait at its build gate for the build.
    early = has_gpu and width >= wanted
    # A Hopper task (sm_90a code) on another GPU is not run: "not available on this GPU", never a failure.
    not_hopper = hopper_absent() if has_gpu and any(task.needs_hopper for task in tasks) else ""
    log(f"building and checking {' '.join(t.id for t in tasks)}: {width} checkers at a time")

    def phase(item: PreparedTask, name: str, **options) -> TaskPhase:
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

    def shards_of(task: Task) -> int:
        return min(task.grading.shards, width)

    def start_early(line: _TaskLine) -> None:
        """A CUDA task's checkers, started now behind its build gate (a task without a build checks at once)."""
        task = line.task
        if not early or not any(name.endswith(".cu") for name in task.files) or (task.needs_hopper and not_hopper):
            return
        line.expected = expected = expected_preparation(task, workdir)
        line.gate = HeldFile(workdir / f"built-{task.id}")
        gate = line.gate.path
        line.early = [phase(expected, CHECKS, shard=(i, shards_of(task)), gate=gate) for i in range(shards_of(task))]
        if task.timing:
            line.turn = HeldFile(workdir / f"turn-{task.id}")
            line.timing = phase(expected, TIMING, turn=line.turn.path, gate=gate)

    def build(line: _TaskLine) -> _TaskLine:
        with builds:
            began = time.monotonic()
            line.prepared = prepare(line.task)
            line.build_s = time.monotonic() - began
        return line

    def check(line: _TaskLine, checkers: ThreadPoolExecutor) -> list:
        """Give ``line``'s checkers their build (or start them now) and submit its checks; called from this thread,
        which outlives every process it starts (a checker dies with the thread that started it: PR_SET_PDEATHSIG)."""
        task, item, expected = line.task, line.prepared, line.expected
        if line.early and (
            item.status != "ready" or (item.impl_dir, item.python_files) != (expected.impl_dir, expected.python_files)
        ):
            line.cancel()  # no build to check, or not the one they were started for
        if item.status != "ready":
            line.run = TaskRun(task.id, item.status, item.reason, notes=item.notes)
            return []
        if task.needs_gpu and not has_gpu and not has_cpu_checks(task):
            line.run = TaskRun(task.id, "not_run", "this grading host has no CUDA GPU", notes=item.notes)
            return []
        if task.needs_hopper and not_hopper:
            line.run = TaskRun(task.id, "not_run", f"not available on this GPU: {not_hopper}", notes=item.notes)
            return []
        if line.early:
            for checker in [*line.early, line.timing]:
                if checker is not None:
                    checker.notes = list(item.notes)
            line.gate.give()
            shards, line.early = line.early, []
            return [checkers.submit(shard.finish) for shard in shards]
        if has_gpu and task.timing:
            line.turn = HeldFile(workdir / f"turn-{task.id}")
            line.timing = phase(item, TIMING, turn=line.turn.path)
        count = shards_of(task)
        return [checkers.submit(lambda i: phase(item, CHECKS, shard=(i, count)).finish(), i) for i in range(count)]

    phases: dict[str, float] = {}
    try:
        with ThreadPoolExecutor(max_workers=width) as checkers, ThreadPoolExecutor(max_workers=len(lines)) as builders:
            for line in lines:
                start_early(line)
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
        # No turn before every timing checker is ready (its workloads built while the checks ran), so no checker's
        # preparation runs while another task is timed; one that is not ready within READY_S is not waited for.
        for line in lines:
            wait = max(0.0, READY_S * scale - (time.monotonic() - began))
            if line.timing is not None and not line.timing.wait_ready(wait):
                log(f"the timing checker of {line.task.id} was not ready after {READY_S * scale:.0f} s")
        phases["ready_s"] = time.monotonic() - began
        # The next turn as soon as a checker says it has timed everything and handed the GPU on; the rest of its
        # process (its exit, its results read) runs beside the next task's timing. A checker that hangs, crashes or
        # runs out of time is run to its end first.
        ending: list[tuple[_TaskLine, Future]] = []
        with ThreadPoolExecutor(max_workers=max(1, len(lines))) as enders:
            for line in lines:
                if line.timing is None:
                    continue
                timing, line.timing = line.timing, None
                if line.run.status != "ran":
                    timing.cancel()
                    continue
                log(f"timing {line.task.id}, the GPU to itself")
                line.turn.give()
                if timing.wait_timed():
                    ending.append((line, enders.submit(timing.finish)))
                else:
                    line.run = merged(line.run, timing.finish())
            for line, future in ending:
                line.run = merged(line.run, future.result())
        phases["timing_s"] = time.monotonic() - began
    finally:
        for line in lines:
            line.cancel()
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
