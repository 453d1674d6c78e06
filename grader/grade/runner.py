"""Grading phase 3: run one task's hidden suite in a checker process and read back what happened.

The checker is ``python -m pytest`` on the hidden suite with the grader's plugin
(``grader.grade.checker_plugin``), in its own session, with a wall-clock budget from the registry
(``[task.grading]``). It never imports student code: Python goes through the sandboxed worker,
CUDA is the spliced library (kit host code, student device code). The runner trusts only what the
checker wrote: the ids it collected, its JSON report and its events (a check that hung, a CUDA fault).
A collected check with no result is a failure with the reason; a crash, a hang or a CUDA fault
scores the task zero; every other task and submission is untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from assignment.cuda.compiler import DEVICE_PRINTF_SETTING, SOURCE_RULES_SETTING
from assignment.cuda.confine import ISOLATION_SETTING
from assignment.registry import Task
from grader.grade.checker_plugin import HANG_EXIT_CODE
from grader.grade.config import HIDDEN_DIR, REPO_ROOT, GradeConfig
from grader.grade.prepare import GRADING_DEVICE_PRINTF, PreparedTask, compile_isolation
from grader.isolation.client import WorkerConfig


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

    @property
    def display_name(self) -> str:
        return display_name(self.nodeid)


def display_name(nodeid: str) -> str:
    func = nodeid.split("::")[-1]
    base, _, params = func.partition("[")
    base = base.removeprefix("test_").replace("_", " ")
    return f"{base} ({params.rstrip(']').replace('-', ', ')})" if params else base


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


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def hidden_suite(task: Task) -> list[Path]:
    return sorted(HIDDEN_DIR.glob(f"test_{task.id}_*.py"))


def _read_report(path: Path) -> list[TestOutcome]:
    data = json.loads(path.read_text())
    outcomes = []
    for test in data.get("tests", []):
        phase_failed = next(
            (test[p] for p in ("setup", "call", "teardown") if p in test and test[p].get("outcome") == "failed"), None
        )
        message = ""
        if phase_failed is not None:
            crash = phase_failed.get("crash") or {}
            message = crash.get("message", "") or str(phase_failed.get("longrepr", ""))[-300:]
        elif test.get("outcome") == "skipped":
            longrepr = (test.get("setup") or test.get("call") or {}).get("longrepr", "")
            message = longrepr if isinstance(longrepr, str) else str(longrepr)
        metadata = test.get("metadata") or {}
        keywords = test.get("keywords", [])
        outcomes.append(
            TestOutcome(
                nodeid=test["nodeid"],
                outcome=test["outcome"],
                message=message,
                is_perf="perf" in keywords,
                is_structure="structure" in keywords,
                timing=metadata.get("timing", {}),
                check=metadata.get("check", {}),
                reproduce=metadata.get("reproduce", ""),
                duration_s=sum((test.get(p) or {}).get("duration", 0.0) for p in ("setup", "call", "teardown")),
            )
        )
    return outcomes


def _events(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def checker_environment(
    prepared: PreparedTask, workdir: Path, config: GradeConfig, seed: int, worker: WorkerConfig | None
) -> dict[str, str]:
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
        KIT_COLLECTED_FILE=str(workdir / f"collected_{task.id}.json"),
        KIT_EVENTS_FILE=str(workdir / f"events_{task.id}.jsonl"),
        KIT_TEST_DEADLINE_S=str(task.grading.test_deadline_s * config.timeout_scale),
        **config.extra_env,
    )
    if config.threads:
        env.update(OMP_NUM_THREADS=str(config.threads), MKL_NUM_THREADS=str(config.threads))
    for name in ("KIT_CUDA_ARCH", "KIT_BWRAP"):
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


def run_task(
    prepared: PreparedTask, workdir: Path, config: GradeConfig, seed: int, worker: WorkerConfig | None = None
) -> TaskRun:
    task = prepared.task
    suite = hidden_suite(task)
    if not suite:
        return TaskRun(task.id, "crashed", f"no hidden tests found for {task.id} (instructor error)")
    report = workdir / f"report_{task.id}.json"
    log = workdir / f"pytest_{task.id}.log"
    env = checker_environment(prepared, workdir, config, seed, worker)
    command = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, suite),
        "-m",
        task.id,
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "grader.grade.checker_plugin",
        "--rootdir",
        str(REPO_ROOT),
        "-c",
        str(REPO_ROOT / "pyproject.toml"),
        "--json-report",
        f"--json-report-file={report}",
        "--json-report-omit",
        "log",
        "streams",
        *(["-k", config.select] if config.select else []),
    ]
    timeout = task.grading.timeout_s * config.timeout_scale
    start = time.monotonic()
    with open(log, "wb") as log_file:
        child = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
    duration = time.monotonic() - start
    tail = log.read_text(errors="replace")[-4000:]
    base = dict(seed=seed, duration_s=duration, notes=list(prepared.notes), log=tail)
    events = _events(Path(env["KIT_EVENTS_FILE"]))
    hang = next((e for e in events if e.get("event") == "hang"), None)
    if hang or code == HANG_EXIT_CODE:
        what = (
            f"the check '{display_name(hang['nodeid'])}' ran past its time limit"
            if hang
            else "a check ran past its time limit"
        )
        return TaskRun(task.id, "timeout", f"{what} (an infinite loop, a deadlock or a hang?)", **base)
    died = next((e for e in events if e.get("event") == "worker_crash"), None)
    if died:
        return TaskRun(
            task.id,
            "crashed",
            f"during the check '{display_name(died['nodeid'])}': {died.get('summary', 'the code crashed')}",
            **base,
        )
    if code is None:
        return TaskRun(task.id, "timeout", f"the hidden suite took longer than {timeout:.0f} s", **base)
    fault = next((e for e in events if e.get("event") == "cuda_fault"), None)
    if fault:
        return TaskRun(
            task.id,
            "crashed",
            f"a CUDA fault in the check '{display_name(fault['nodeid'])}' "
            f"({fault.get('summary', '')}); the remaining checks could not run "
            "(try compute-sanitizer: make sanitize T=" + task.id + ")",
            **base,
        )
    collected_file = Path(env["KIT_COLLECTED_FILE"])
    if not collected_file.is_file():
        return TaskRun(
            task.id, "crashed", "the hidden suite could not be collected (instructor error: see the log)", **base
        )
    collected = json.loads(collected_file.read_text())
    tests = _read_report(report) if report.is_file() else []
    missing = [n for n in collected if n not in {t.nodeid for t in tests}]
    if code not in (0, 1) or not report.is_file():
        why = f"signal {-code}" if code < 0 else f"exit code {code}"
        at = f" during the check '{display_name(missing[0])}'" if missing else ""
        return TaskRun(task.id, "crashed", f"the checker process crashed ({why}){at}", **base)
    if not collected:
        return TaskRun(task.id, "crashed", "no hidden check was collected (instructor error)", **base)
    tests, extra = reconcile(collected, tests)
    run = TaskRun(task.id, "ran", tests=tests, **base)
    if extra:
        run.instructor.append(f"ignored {len(extra)} results for checks that were never collected")
    return run


def reconcile(collected: list[str], tests: list[TestOutcome]) -> tuple[list[TestOutcome], list[str]]:
    """One outcome per collected check, in collection order: a check with no result fails, a result for
    a check that was never collected is dropped (returned second)."""
    by_id = {t.nodeid: t for t in tests}
    outcomes = [
        by_id.get(n)
        or TestOutcome(
            n,
            "failed",
            "this check reported no result",
            check={"kind": "crash", "summary": "this check reported no result"},
        )
        for n in collected
    ]
    return outcomes, sorted(set(by_id) - set(collected))
