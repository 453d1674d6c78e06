"""Run one task's hidden suite in a child process and read back what happened.

The child is ``python -m pytest`` with pytest-json-report, started in its own
process group in the submission's working directory. A crash, a hang or an
import error in it scores that task zero with the reason; the parent and
every other task are untouched.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from assignment.registry import Task
from grader.config import HIDDEN_DIR, REPO_ROOT, GradeConfig


@dataclass
class TestOutcome:
    nodeid: str
    outcome: str  # passed | failed | skipped | error
    message: str = ""
    is_perf: bool = False
    timing: dict = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def display_name(self) -> str:
        func = self.nodeid.split("::")[-1]
        base, _, params = func.partition("[")
        base = base.removeprefix("test_").replace("_", " ")
        return f"{base} ({params.rstrip(']').replace('-', ', ')})" if params else base


@dataclass
class TaskRun:
    task_id: str
    status: str  # ran | not_run | timeout | crashed | missing_files
    reason: str = ""
    tests: list[TestOutcome] = field(default_factory=list)
    seed: int | None = None
    duration_s: float = 0.0


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def hidden_suite(task: Task) -> list[Path]:
    return sorted(HIDDEN_DIR.glob(f"test_{task.id}_*.py"))


def _limit_child() -> None:  # runs in the child before exec
    import resource

    os.setsid()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


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
            message = crash.get("message", "") or phase_failed.get("longrepr", "")[-300:]
        elif test.get("outcome") == "skipped":
            longrepr = (test.get("setup") or {}).get("longrepr", "")
            message = longrepr if isinstance(longrepr, str) else str(longrepr)
        metadata = test.get("metadata") or {}
        outcomes.append(
            TestOutcome(
                nodeid=test["nodeid"],
                outcome=test["outcome"],
                message=message,
                is_perf="perf" in test.get("keywords", []),
                timing=metadata.get("timing", {}),
                duration_s=sum((test.get(p) or {}).get("duration", 0.0) for p in ("setup", "call", "teardown")),
            )
        )
    return outcomes


def run_task(task: Task, student_dir: Path, workdir: Path, config: GradeConfig) -> TaskRun:
    if task.needs_gpu and not gpu_available():
        return TaskRun(task.id, "not_run", "this grading host has no CUDA GPU")
    missing = [f for f in task.files if not (student_dir / f).is_file()]
    if missing:
        return TaskRun(task.id, "missing_files", f"file(s) not found in the submission: {', '.join(missing)}")
    suite = hidden_suite(task)
    if not suite:
        return TaskRun(task.id, "crashed", f"no hidden tests found for {task.id} (instructor error)")
    seed = config.seed if config.seed is not None else secrets.randbelow(2**31)
    report = workdir / f"report_{task.id}.json"
    log = workdir / f"pytest_{task.id}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # Keep what the host's PYTHONPATH provides (pytest plugins carried as wheels, say).
    python_path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(
        IMPL=str(student_dir),
        KIT_SEED=str(seed),
        PYTHONPATH=python_path,
        PYTHONDONTWRITEBYTECODE="1",
        **config.extra_env,
    )
    if not config.share_cuda_cache:
        env["KIT_CACHE_DIR"] = str(workdir / ".kit_cache")
    command = [
        sys.executable, "-m", "pytest", *map(str, suite), "-m", task.id, "-q", "-p", "no:cacheprovider",
        "--rootdir", str(REPO_ROOT), "-c", str(REPO_ROOT / "pyproject.toml"),
        "--json-report", f"--json-report-file={report}", "--json-report-omit", "log", "streams",
    ]
    timeout = config.timeout_for(task.needs_gpu)
    start = time.monotonic()
    with open(log, "wb") as log_file:
        child = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log_file, stderr=subprocess.STDOUT, preexec_fn=_limit_child
        )
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            return TaskRun(task.id, "timeout", f"timed out after {timeout:.0f} s (an infinite loop or a hang?)",
                           seed=seed, duration_s=time.monotonic() - start)
    duration = time.monotonic() - start
    tail = log.read_text(errors="replace")[-1500:]
    if code not in (0, 1) or not report.is_file():
        why = f"signal {-code}" if code < 0 else f"exit code {code}"
        hint = _crash_reason(tail)
        return TaskRun(task.id, "crashed", f"the test process crashed ({why}){hint}", seed=seed, duration_s=duration)
    tests = _read_report(report)
    if not tests:
        return TaskRun(task.id, "crashed", "no hidden test ran (collection error?)" + _crash_reason(tail),
                       seed=seed, duration_s=duration)
    return TaskRun(task.id, "ran", tests=tests, seed=seed, duration_s=duration)


def _crash_reason(log_tail: str) -> str:
    for pattern in (r"(\w+Error: .*)", r"(Segmentation fault.*)", r"(illegal memory access.*)"):
        match = re.search(pattern, log_tail)
        if match:
            return f": {match.group(1)[:200]}"
    return ""
