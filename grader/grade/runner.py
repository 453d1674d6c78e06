"""Grading phase 3: run one task's hidden suite in checker processes and read back what happened.

A checker is ``python -m pytest`` on the hidden suite with the grader's plugin (grader/grade/checker_plugin.py),
started by grader/grade/checker_process.py. It never imports student code: Python goes through the sandboxed worker,
CUDA is the spliced library (kit host code, student device code). The runner trusts only what the checker wrote: the
ids it collected, each check's result as it finished, and its events (a check past its deadline, a CUDA fault).

A task is run in two phases (``CHECKS``, then ``TIMING``: the ``perf`` checks, on a GPU the grading has to itself;
grader/grade/grade.py orders them). Within a phase:

* a check past its deadline fails that check only: a worker call past it returns at once, a check stuck in the
  checker (a kernel that never ends) ends the process and the remaining checks go on in a new one;
* such a check is then rerun once alone (the host's ``checks`` gate held exclusively, its deadline from the host's
  pace measured again) before it counts: a busy host does not cost honest work its points. Once a rerun alone has
  run past its deadline too, later checks of that kind are not rerun (that code hangs, not the host);
* the phase has a budget, the registry's ``timeout_s`` scaled like every deadline; checks it leaves unrun fail;
* a crash of the student's worker or a CUDA fault that poisons the context ends the task: it scores zero with the
  reason, and every other task and submission is untouched.

No message names a hidden case: a check that ran past its deadline is named by its kind ("naive"), not its case.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from assignment.cuda.compiler import DEVICE_PRINTF_SETTING, SOURCE_RULES_SETTING
from assignment.cuda.confine import ISOLATION_SETTING
from assignment.registry import Task
from grader.grade import pace
from grader.grade.checker_plugin import CHECKS, HANG_EXIT_CODE
from grader.grade.checker_process import CheckerProcess, Ended, end_sandboxes
from grader.grade.config import HIDDEN_DIR, REPO_ROOT, GradeConfig
from grader.grade.host_gate import Gate, gpu_gate_name
from grader.grade.prepare import GRADING_DEVICE_PRINTF, PreparedTask, compile_isolation
from grader.isolation.client import WorkerConfig

NO_TESTS_COLLECTED = 5  # pytest's exit code when a selection leaves nothing to run
RERUN_ALLOWANCE_S = 120.0  # a rerun alone: its process's start and collection beyond the check's own deadline


@dataclass
class TestOutcome:
    nodeid: str
    outcome: str  # passed | failed | skipped | error
    message: str = ""
    is_perf: bool = False
    is_structure: bool = False
    timing: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)  # kind / summary from the checker plugin
    reproduce: str = ""
    duration_s: float = 0.0
    alone: bool = False  # the result of a rerun alone (the first run ran past its deadline)
    began_at: float = 0.0  # when the check began (time.time(), in the checker)
    shard: str = ""  # the checker it ran in: "i/n" of its phase

    @property
    def display_name(self) -> str:
        return display_name(self.nodeid)


def display_name(nodeid: str) -> str:
    func = nodeid.split("::")[-1]
    base, _, params = func.partition("[")
    base = base.removeprefix("test_").replace("_", " ")
    return f"{base} ({params.rstrip(']').replace('-', ', ')})" if params else base


def kind_name(nodeid: str) -> str:
    """A check's kind without its parameters (which name hidden cases): what a message about it may say."""
    return nodeid.split("::")[-1].partition("[")[0].removeprefix("test_").replace("_", " ")


@dataclass
class TaskRun:
    task_id: str
    status: str  # ran | not_run | timeout | crashed | missing_files | rejected | compile_error
    reason: str = ""
    tests: list[TestOutcome] = field(default_factory=list)
    seed: int | None = None
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # shown to the student
    instructor: list[str] = field(default_factory=list)  # grading.json only
    log: str = ""
    phases: dict[str, float] = field(default_factory=dict)  # seconds of each phase (checks, timing)
    positions: dict[str, int] = field(default_factory=dict)  # each check's place in its task's whole collection


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def hidden_suite(task: Task) -> list[Path]:
    return sorted(HIDDEN_DIR.glob(f"test_{task.id}_*.py"))


def outcome_of(record: dict) -> TestOutcome:
    """A check's result as the checker plugin wrote it."""
    return TestOutcome(
        nodeid=str(record.get("nodeid", "")),
        outcome=str(record.get("outcome", "failed")),
        message=str(record.get("message", "")),
        is_perf=bool(record.get("perf")),
        is_structure=bool(record.get("structure")),
        timing=dict((record.get("record") or {}).get("timing") or {}),
        check=dict(record.get("check") or {}),
        reproduce=str(record.get("reproduce", "")),
        duration_s=float(record.get("duration_s", 0.0)),
        began_at=float(record.get("began_at", 0.0)),
        shard=str(record.get("shard", "")),
    )


def checker_environment(
    prepared: PreparedTask,
    workdir: Path,
    config: GradeConfig,
    seed: int,
    worker: WorkerConfig | None,
    *,
    phase: str = CHECKS,
    scale: float = 1.0,
    uses_gpu: bool = False,
    threads: int | None = None,
) -> dict[str, str]:
    """The checker's environment: its seed, its caches, its deadlines (the task's, times ``scale``: the host's pace
    and the grader's timeout scale), the gates, its CPU threads (``threads``, when the grading's setting gives none)
    and where the worker's settings are."""
    task = prepared.task
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KIT_", "IMPL"))}
    # Keep what the host's PYTHONPATH provides (pytest plugins carried as wheels, say).
    python_path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(
        KIT_SEED=str(seed),
        PYTHONPATH=python_path,
        PYTHONDONTWRITEBYTECODE="1",
        KIT_CACHE_DIR=str(config.submission_cache_root),
        KIT_REFERENCE_CACHE_DIR=str(config.reference_cache),
        KIT_TEST_DEADLINE_S=str(task.grading.test_deadline_s),
        KIT_DEADLINE_SCALE=f"{scale:.4f}",
        KIT_PHASE=phase,
        KIT_GATES="1" if config.gates else "0",
        KIT_USES_GPU="1" if uses_gpu else "0",
        **config.extra_env,
    )
    if config.threads or threads:
        count = str(config.threads or threads)
        env.update(OMP_NUM_THREADS=count, MKL_NUM_THREADS=count)
    for name in ("KIT_CUDA_ARCH", "KIT_BWRAP", "KIT_GRADING_LOCKS"):
        if name in os.environ:
            env[name] = os.environ[name]
    # A build the checker makes (the prepared ones are cache hits) is confined and checked as prepare's were.
    env[ISOLATION_SETTING] = compile_isolation(config)
    env[SOURCE_RULES_SETTING] = "1" if config.cuda_rules else "0"
    env[DEVICE_PRINTF_SETTING] = "on" if GRADING_DEVICE_PRINTF else "off"
    if prepared.impl_dir is not None:
        env["IMPL"] = str(prepared.impl_dir)
    if worker is not None:
        path = workdir / f"worker_{task.id}.json"
        path.write_text(worker.to_json())
        env["KIT_WORKER_CONFIG"] = str(path)
    return env


class TaskPhase:
    """One phase of one task's hidden suite, its checker started now (a timing phase waits in its checker for the
    turn the grader gives it; with ``gate``, a checker started before the task's build ended waits for that build);
    ``finish`` runs it to the end: further processes after a hang, reruns alone."""

    def __init__(
        self,
        prepared: PreparedTask,
        workdir: Path,
        config: GradeConfig,
        seed: int,
        worker: WorkerConfig | None = None,
        *,
        phase: str = CHECKS,
        scale: float = 1.0,
        uses_gpu: bool = False,
        turn: Path | None = None,
        gate: Path | None = None,
        shard: tuple[int, int] = (0, 1),
        threads: int | None = None,
    ):
        self.task, self.config, self.workdir, self.seed, self.phase, self.scale = (
            prepared.task,
            config,
            workdir,
            seed,
            phase,
            scale,
        )
        self.notes = list(prepared.notes)
        self.suite = hidden_suite(self.task)
        self.marks = f"{self.task.id} and {'not ' if phase == CHECKS else ''}perf"
        self.env = checker_environment(
            prepared, workdir, config, seed, worker, phase=phase, scale=scale, uses_gpu=uses_gpu, threads=threads
        )
        if turn is not None:
            self.env["KIT_TIMING_TURN"] = str(turn)
        if gate is not None:  # started before its build ended: its first check waits for the build
            self.env["KIT_BUILD_GATE"] = str(gate)
        self.shard = shard
        self.uses_gpu = uses_gpu
        self.env["KIT_SHARD"] = f"{shard[0]}/{shard[1]}"
        self.segments = 0
        self.turn_at: float | None = None
        self.first = self._start() if self.suite else None

    def _start(self, *, only: list[str] | None = None, skip=(), alone: bool = False) -> CheckerProcess:
        self.segments += 1
        name = f"{self.task.id}-{self.phase}-{self.shard[0]}-{self.segments}"
        env = dict(self.env, KIT_RUN_ALONE="1") if alone else self.env
        if alone:
            env["KIT_DEADLINE_SCALE"] = (
                f"{self.config.timeout_scale * pace.measure(self.config.pace_reference_ms)[0]:.4f}"
            )
        return CheckerProcess(
            name, self.suite, self.marks, env, self.workdir, only=only, skip=skip, select=self.config.select
        )

    def cancel(self) -> None:
        if self.first is not None:
            self.first.stop()

    def wait_ready(self, seconds: float) -> bool:
        """A timing phase: wait at most ``seconds`` until its checker is ready to time (its workloads built, waiting
        for its turn: the ``timing_ready`` event) or has ended; whether it got there."""
        until = time.monotonic() + seconds
        while self.first is not None and self.first.process.poll() is None:
            if any(e.get("event") == "timing_ready" for e in self.first.events()):
                return True
            if time.monotonic() >= until:
                return False
            time.sleep(0.05)
        return True

    def wait_timed(self, seconds: float | None = None) -> bool:
        """A timing phase given its turn: wait at most ``seconds`` (None: the phase's budget) until its checker has
        timed every rule and handed the GPU on (the ``timing_done`` event: its sandboxed workers ended, its GPU work
        drained, its gates let go), then end what it recorded of its sandboxes here too; whether it got there. False when the checker ended, hung
        or ran out of time first: ``finish`` then runs the phase to its end before the next task's turn."""
        self.turn_at = time.monotonic()
        until = self.turn_at + (self.task.grading.timeout_s * self.scale if seconds is None else seconds)
        while self.first is not None and self.first.process.poll() is None:
            events = self.first.events()
            if any(e.get("event") == "timing_done" for e in events):
                end_sandboxes(events)
                return True
            if time.monotonic() >= until:
                return False
            time.sleep(0.02)
        return False

    def finish(self) -> TaskRun:
        task = self.task
        base = dict(seed=self.seed, notes=self.notes)
        if self.first is None:
            return TaskRun(task.id, "crashed", f"no hidden tests found for {task.id} (instructor error)", **base)
        started = self.turn_at or time.monotonic()  # a timing phase's time and budget count from its turn
        budget = task.grading.timeout_s * self.scale
        results: dict[str, TestOutcome] = {}
        overdue: dict[str, float] = {}  # checks past their deadline, still to be settled: nodeid -> seconds allowed
        collected: list[str] | None = None
        logs: list[str] = []
        process = self.first
        while True:
            ended = process.wait(budget - (time.monotonic() - started))
            logs.append(ended.log)
            if collected is None:
                collected, positions = ended.collected, ended.positions
                if collected is None:
                    return self._ended_early(ended, None, logs, started, base)
            for record in ended.results:
                outcome = outcome_of(record)
                if outcome.nodeid in collected:
                    results[outcome.nodeid] = outcome
            for record in ended.events:
                if record.get("event") in ("deadline", "hang") and record.get("nodeid") in collected:
                    overdue[record["nodeid"]] = float(record.get("seconds") or 0)
                    results.pop(record["nodeid"], None)
            fatal = self._ended_early(ended, collected, logs, started, base)
            if fatal is not None:
                return fatal
            remaining = [n for n in collected if n not in results and n not in overdue]
            if ended.code is None:  # the phase's budget ran out
                for nodeid in remaining:
                    results[nodeid] = _timed_out(nodeid, f"not run: the task's checks used up its {budget:.0f} s")
                break
            if ended.code == HANG_EXIT_CODE and remaining:
                process = self._start(skip=[n for n in collected if n not in remaining])
                continue
            break
        self._settle(overdue, results, started + budget)
        tests = [results.get(n) or _no_result(n) for n in collected]
        return TaskRun(
            task.id,
            "ran",
            tests=tests,
            duration_s=time.monotonic() - started,
            log="\n".join(logs)[-4000:],
            phases={self.phase: time.monotonic() - started},
            positions=positions,
            **base,
        )

    def _settle(self, overdue: dict[str, float], results: dict[str, TestOutcome], until: float) -> None:
        """Each check past its deadline: rerun once alone (in the checks phase, until a rerun alone of a check of the same
        kind has run past its deadline too: that code hangs, not the host), else it fails as too slow."""
        hangs: set[str] = set()  # kinds of check whose rerun alone ran past its deadline too
        for nodeid, seconds in overdue.items():
            rerun = None
            if self.phase == CHECKS and kind_name(nodeid) not in hangs and time.monotonic() < until:
                rerun = self._rerun_alone(nodeid)
                if rerun is not None and rerun.nodeid:
                    rerun.alone = True
                    results[nodeid] = rerun
                    continue
                hangs.add(kind_name(nodeid))
            again = ", and again when rerun alone" if rerun is not None else ""
            results[nodeid] = _timed_out(
                nodeid,
                f"a check of '{kind_name(nodeid)}' ran past its time limit ({seconds:.0f} s){again} "
                "(an infinite loop, a deadlock or a hang?)",
            )

    def _rerun_alone(self, nodeid: str) -> TestOutcome | None:
        """``nodeid`` in a new checker with the host to itself: its result; an empty outcome when it ran past its
        deadline again; None when it could not be rerun."""
        gates = self.config.gates
        # The GPU gate before the checks gate, as every checker takes them (a timing of another grading on this GPU
        # then finishes first); this process holds the GPU gate for the rerun, which takes no gate itself.
        with (
            Gate(gpu_gate_name()).shared() if gates and self.uses_gpu else contextlib.nullcontext(),
            Gate("checks").exclusive() if gates else contextlib.nullcontext(),
        ):
            process = self._start(only=[nodeid], alone=True)
            ended = process.wait(self.task.grading.timeout_s * self.scale + RERUN_ALLOWANCE_S)
        if any(e.get("event") in ("deadline", "hang") for e in ended.events) or ended.code is None:
            return TestOutcome("", "failed")
        found = [outcome_of(r) for r in ended.results if r.get("nodeid") == nodeid]
        return found[0] if found else None

    def _ended_early(
        self, ended: Ended, collected: list[str] | None, logs: list[str], started: float, base: dict
    ) -> TaskRun | None:
        """The TaskRun of a process whose end ends the task (a worker that died, a CUDA fault, a crash), or None."""
        task = self.task
        seconds = time.monotonic() - started
        base = dict(base, duration_s=seconds, log="\n".join(logs)[-4000:], phases={self.phase: seconds})
        died, fault = ended.first("worker_crash"), ended.first("cuda_fault")
        if died:
            why = f"during a check of '{kind_name(died['nodeid'])}': {died.get('summary', 'the code crashed')}"
            return TaskRun(task.id, "crashed", why, **base)
        if fault:
            why = (
                f"a CUDA fault in a check of '{kind_name(fault['nodeid'])}' ({fault.get('summary', '')}); the "
                f"remaining checks could not run (try compute-sanitizer: make sanitize T={task.id})"
            )
            return TaskRun(task.id, "crashed", why, **base)
        if collected is None:
            if ended.code is None:
                return TaskRun(task.id, "timeout", "the hidden suite did not start within its time budget", **base)
            return TaskRun(task.id, "crashed", "the hidden suite could not be collected (instructor error)", **base)
        if not collected and self.phase == CHECKS and not self.config.select:
            return TaskRun(task.id, "crashed", "no hidden check was collected (instructor error)", **base)
        if ended.code in (None, 0, 1, HANG_EXIT_CODE, NO_TESTS_COLLECTED):
            return None
        why = f"signal {-ended.code}" if ended.code < 0 else f"exit code {ended.code}"
        return TaskRun(task.id, "crashed", f"the checker process crashed ({why})", **base)


def _timed_out(nodeid: str, summary: str) -> TestOutcome:
    return TestOutcome(nodeid, "failed", summary, check={"kind": "timeout", "summary": summary})


def _no_result(nodeid: str) -> TestOutcome:
    return TestOutcome(
        nodeid,
        "failed",
        "this check reported no result",
        check={"kind": "crash", "summary": "this check reported no result"},
    )


def merged(checks: TaskRun, timing: TaskRun | None) -> TaskRun:
    """A task's two phases as one run: the checks' status unless the timing phase ended the task."""
    if timing is None:
        return checks
    if timing.status != "ran":
        failed = timing
        failed.phases = {**checks.phases, **timing.phases}
        failed.duration_s += checks.duration_s
        return failed
    checks.tests += timing.tests
    checks.duration_s += timing.duration_s
    checks.phases.update(timing.phases)
    checks.log = (checks.log + "\n" + timing.log)[-4000:]
    return checks


def merged_shards(runs: list[TaskRun]) -> TaskRun:
    """The runs of one task's checks dealt to ``len(runs)`` checkers as one run, the checks back in their order of
    collection; a shard whose run ended the task ends it."""
    if len(runs) == 1:
        return runs[0]
    ended = next((run for run in runs if run.status != "ran"), None)
    if ended is not None:
        return ended
    positions = {nodeid: place for run in runs for nodeid, place in run.positions.items()}
    tests = sorted((t for run in runs for t in run.tests), key=lambda t: positions.get(t.nodeid, len(positions)))
    first = runs[0]
    first.tests = tests
    first.positions = positions
    first.duration_s = max(run.duration_s for run in runs)
    first.phases = {name: max(run.phases.get(name, 0.0) for run in runs) for name in first.phases}
    first.instructor = [line for run in runs for line in run.instructor]
    first.log = "\n".join(run.log for run in runs)[-4000:]
    return first


def reconcile(collected: list[str], tests: list[TestOutcome]) -> tuple[list[TestOutcome], list[str]]:
    """One outcome per collected check, in collection order: a check with no result fails, a result for
    a check that was never collected is dropped (returned second)."""
    by_id = {t.nodeid: t for t in tests}
    outcomes = [by_id.get(n) or _no_result(n) for n in collected]
    return outcomes, sorted(set(by_id) - set(collected))
