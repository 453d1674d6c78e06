"""A class grading's plan (grader/classroom/batch_queue.py runs it): the lanes a submission's tasks are graded in and
their time limits, the workers (one per GPU, CPU ones on the cores the GPU workers leave) and the jobs and runs the
queue tracks, with the environment and the arguments of a lane's process."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from assignment.registry import Task
from grader.classroom import ledger
from grader.classroom.roster import Submission
from grader.grade.config import REPO_ROOT, GradeConfig

# Seconds a lane may take beyond its tasks' registry limits: Python and torch starting, the submission read,
# the sandboxed workers starting (measured: t7 graded whole in 12 s on a 2-core CI machine, of which ~4 s start-up).
LANE_OVERHEAD_S = 120
CORES_PER_LANE = 4


# --------------------------------------------------------------------------- settings


@dataclass
class Lane:
    name: str  # "gpu" | "cpu"
    tasks: list[Task]

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.tasks]


def plan_lanes(tasks: list[Task], gpus: list[str], jobs: int, split: bool) -> list[Lane]:
    """GPU tasks on the GPU workers; the others on CPU workers (with no GPU visible) unless ``split`` is off or
    there are no CPU workers. No GPU: everything is CPU work (the GPU tasks then report "not run"). No task at all
    (the theory answers alone): one CPU lane."""
    if not gpus or not tasks:
        return [Lane("cpu", tasks)]
    gpu_tasks = [t for t in tasks if t.needs_gpu]
    cpu_tasks = [t for t in tasks if not t.needs_gpu]
    if not split or jobs < 1 or not cpu_tasks:
        return [Lane("gpu", tasks)]
    return [lane for lane in (Lane("gpu", gpu_tasks), Lane("cpu", cpu_tasks)) if lane.tasks]


def grading_settings(
    tasks: list[Task], lanes: list[Lane], config: GradeConfig, theory: bool = False, seeding: str = ""
) -> dict:
    """What shapes a grade besides the submission and the grader: part of the done-marker's key. ``seeding``:
    grader/grade/seeds.py's settings_key (the fixed seed, or the salt's fingerprint: a new salt grades everyone
    again)."""
    return {
        "tasks": [t.id for t in tasks],
        "lanes": {lane.name: lane.ids for lane in lanes},
        "timeout_scale": config.timeout_scale,
        "select": config.select,
        "theory": theory,
        "seeding": seeding,
    }


def grading_id(sub: Submission) -> str:
    """Who a submission's hidden seeds are drawn for (grader/grade/seeds.py): its first submitter's SID, else their
    email, else its own id (a folder class names each submission by the student id)."""
    return (
        next((s.sid for s in sub.students if s.sid), None)
        or next((s.email for s in sub.students if s.email), None)
        or sub.id
    )


def theory_lane(lanes: list[Lane]) -> str:
    """The lane that grades the theory answers (grader/grade/theory.py: no GPU, a second): the CPU lane where there
    is one."""
    return next((lane.name for lane in lanes if lane.name == "cpu"), lanes[0].name)


def lane_time_limit(lane: Lane, config: GradeConfig) -> float:
    build = config.build_timeout_s if any(f.endswith(".cu") for t in lane.tasks for f in t.files) else 0.0
    return sum(t.grading.timeout_s for t in lane.tasks) * config.timeout_scale + build + LANE_OVERHEAD_S


def _cores() -> list[int]:
    """The cores this process may use (a Slurm allocation or a cgroup may give fewer than the host has)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def gpu_core_share(n_gpus: int, n_cores: int) -> int:
    """Cores kept free for each GPU worker (0: none kept): half the host over the GPUs, at least CORES_PER_LANE/2.
    A GPU lane builds its CUDA files side by side and times calls whose launch (and, for t6, the sandboxed
    worker's round trip) runs on the CPU: CPU lanes on the same cores would slow those and shift the scores."""
    if n_gpus == 0 or n_cores < 2 * n_gpus + 2:
        return 0
    return max(CORES_PER_LANE // 2, n_cores // (2 * n_gpus))


def default_jobs(gpus: list[str]) -> int:
    """CPU workers: a t1/t7 grading keeps about CORES_PER_LANE cores busy (the sandbox's 4 threads, the checker's
    reference computations); they share the cores the GPU workers do not keep."""
    cores = len(_cores())
    return max(1, (cores - gpu_core_share(len(gpus), cores) * len(gpus)) // CORES_PER_LANE)


# --------------------------------------------------------------------------- workers and jobs


@dataclass
class Worker:
    name: str  # gpu0, cpu1, ...
    kind: str  # "gpu" | "cpu"
    device: str = ""  # CUDA_VISIBLE_DEVICES for its processes ("" hides every GPU)
    gpu_name: str = ""
    cores: list[int] = field(default_factory=list)  # its processes' CPU affinity ([]: not pinned)
    threads: int = 0  # OMP/MKL threads of its processes (0: the host's default)
    checkers: int = 1  # checker processes one of its gradings runs at once (GradeConfig.parallel)
    check: dict = field(default_factory=dict)
    busy: Running | None = None

    def describe(self) -> str:
        where = f"{self.gpu_name or 'GPU'}, CUDA device {self.device}" if self.kind == "gpu" else ""
        cores = f"cores {core_ranges(self.cores)}" if self.cores else ""
        return self.name + (f" ({', '.join(x for x in (where, cores) if x)})" if where or cores else "")


def core_ranges(numbers: list[int]) -> str:
    spans, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            spans.append(f"{start}-{n}" if n != start else f"{n}")
            start = None
    return ",".join(spans)


def place_workers(workers: list[Worker]) -> None:
    """Keep cores free for the GPU workers: the CPU workers share the others (pinned, their thread counts to
    match), so a CPU lane never runs on the cores a GPU lane times on. The GPU workers run as a single ``make
    grade`` does (not pinned, the host's thread counts). On an H100 host (16 cores) the solutions' kernel ratios
    (t2-t6) came out 0.98-1.01 in every arrangement tried (pinned or not, split or not); t6's time-between-tokens
    speedup, whose timed step includes the round trip to the sandboxed worker, spread over 10.1-13.5x across six
    gradings whatever the arrangement (grader/records/batch_h100.txt)."""
    cores = _cores()
    gpu_workers = [w for w in workers if w.kind == "gpu"]
    cpu_workers = [w for w in workers if w.kind == "cpu"]
    share = gpu_core_share(len(gpu_workers), len(cores)) if cpu_workers else 0
    rest = cores[share * len(gpu_workers) :]
    for worker in cpu_workers:
        worker.cores = rest if share else []
        worker.threads = max(1, len(rest) // len(cpu_workers))
    # A GPU lane checks its tasks side by side (grader/grade/phases.py): the host's cores shared among the GPU lanes,
    # less two each; a CPU lane's t1/t7 checks one at a time (the CPU workers themselves run side by side).
    for worker in gpu_workers:
        worker.checkers = max(1, len(cores) // len(gpu_workers) - 2)


@dataclass
class Job:
    sub: Submission
    content_hash: str
    key: str
    seed: int | None  # the instructor's --seed for every task; None: derived per student and task
    lanes: list[Lane]
    lock: ledger.StudentLock
    waiting: list[str] = field(default_factory=list)  # lanes not started
    running: set[str] = field(default_factory=set)
    parts: dict[str, ledger.Part] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


@dataclass
class Running:
    job: Job
    lane: Lane
    worker: Worker
    process: subprocess.Popen
    log_path: Path
    limit_s: float
    started: float = field(default_factory=time.monotonic)


class Interrupted(Exception):
    pass


def worker_env(worker: Worker) -> dict[str, str]:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = worker.device
    env["KIT_BATCH_WORKER"] = worker.name
    if worker.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(worker.threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def pin_to_cores(process: subprocess.Popen, worker: Worker) -> None:
    """The worker's cores for a process just started (still a single thread: what it starts later inherits them)."""
    if worker.cores:
        try:
            os.sched_setaffinity(process.pid, worker.cores)
        except OSError:
            pass  # it has already ended: its exit status tells


def grading_args(config: GradeConfig, skip_preflight: bool = False) -> list[str]:
    args = ["--isolation", config.isolation, "--timeout-scale", repr(config.timeout_scale)]
    if config.allow_weak_isolation:
        args.append("--allow-weak-isolation")
    if config.select:
        args += ["--select", config.select]
    if skip_preflight:
        args.append("--skip-preflight")
    return args


def log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"
