"""The plan of a class's grading on Slurm, pure (no Slurm reached): how submissions go into chunks, what each array
element asks for (time, CPUs, a GPU), and the scripts of the grading array and of its collect job.
grader/classroom/slurm.py submits them."""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from assignment.registry import Registry, Task
from grader.classroom.lanes import Lane, lane_time_limit
from grader.grade.config import REPO_ROOT, THEORY, GradeConfig

BATCH_MODULE = "grader.classroom.batch"
# 8 submissions of about 90 s of GPU work each (issue 15's measurement on an H100): elements of about 12 minutes,
# and a class of 600 in 75 elements, well under the MaxArraySize of 1001 that Slurm has by default.
DEFAULT_CHUNK_SIZE = 8
# Per element, beyond its submissions: the job's start and the batch's (its preflight, and each GPU worker timing
# the reference on its GPU before it grades).
ELEMENT_MARGIN_S = 600
COLLECT_TIME = "00:30:00"
# The batch gives a CPU worker (t1/t7) about 4 cores and keeps 4 per GPU worker for its builds and timed checks
# (grader.classroom.batch.default_jobs): an element with the GPU and one CPU worker beside it takes 8, a CPU-only one 4.
CORES_PER_WORKER = 4


@dataclass
class SlurmOptions:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    partition: str | None = None
    account: str | None = None
    sbatch_args: tuple[str, ...] = ()  # extra sbatch arguments, for the array and the collect job
    gres: str | None = None  # None: "gpu:1" when a GPU task is graded, none otherwise
    cpus_per_task: int | None = None  # None: 8 with a GPU task (GPU worker + CPU worker), 4 without
    max_running: int | None = None  # the array's "%n" throttle: at most n elements at once
    collect: bool = True  # submit the dependent collect job
    wait: bool = False  # return when the jobs have ended (tests, scripts)
    python: str = sys.executable  # the Python the elements run (the repository is on a shared disk)
    batch_args: tuple[str, ...] = ()  # passed on to each element's grader.classroom.batch (--allow-weak-isolation)
    collect_args: tuple[str, ...] = ()  # passed on to the collect job's grader.classroom.batch (--due, --roster)
    timeout_scale: float = 1.0  # as the batch's --timeout-scale (the time limit grows with it)
    force: bool = False  # submit although the last round's jobs are still queued or running


def chunked(ids: list[str], size: int) -> list[list[str]]:
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, got {size}")
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def graded_tasks(registry: Registry, task_ids: tuple[str, ...] | list[str] = ()) -> list[Task]:
    """The tasks an element grades (``theory`` among the ids names the theory answers, no task)."""
    return [registry.task(t) for t in task_ids if t != THEORY] if task_ids else list(registry.available)


def seconds_per_submission(tasks: list[Task], timeout_scale: float = 1.0) -> float:
    """The longest one submission may take: the batch's own limit for a lane holding every graded task (each at its
    registry limit, one after the other, the CUDA builds, the lane's overhead). The batch runs the GPU and the CPU
    lanes side by side, so this is an upper bound."""
    config = GradeConfig(timeout_scale=timeout_scale)
    return lane_time_limit(Lane("all", list(tasks)), config)


def time_limit_s(tasks: list[Task], chunk_size: int, timeout_scale: float = 1.0) -> int:
    return math.ceil(seconds_per_submission(tasks, timeout_scale) * chunk_size + ELEMENT_MARGIN_S)


def element_cpus(tasks: list[Task], options: SlurmOptions) -> int:
    gpu = any(t.needs_gpu for t in tasks)
    return options.cpus_per_task or (2 if gpu else 1) * CORES_PER_WORKER


def element_jobs(tasks: list[Task], cpus: int) -> int:
    """The batch's CPU workers in an element: the cores it was given, less the GPU worker's (the batch's own rule,
    grader.classroom.batch.default_jobs, would count every core of the node)."""
    gpu = any(t.needs_gpu for t in tasks)
    return max(1, (cpus - (CORES_PER_WORKER if gpu else 0)) // CORES_PER_WORKER)


def slurm_time(seconds: int) -> str:
    """Slurm's D-HH:MM:SS, rounded up to the minute."""
    minutes = math.ceil(seconds / 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:00"


def default_gres(tasks: list[Task]) -> str | None:
    """One GPU per element when any graded task needs one; none for CPU-only grading (t1, t7)."""
    return "gpu:1" if any(t.needs_gpu for t in tasks) else None


def _directives(items: list[tuple[str, object]]) -> str:
    return "".join(f"#SBATCH --{key}={value}\n" for key, value in items if value not in (None, ""))


def _q(value: object) -> str:
    return shlex.quote(str(value))


def grade_script(
    *,
    submissions: Path,
    out: Path,
    run_dir: Path,
    chunks: list[list[str]],
    tasks: list[Task],
    task_ids: tuple[str, ...],
    options: SlurmOptions,
    time_limit: str,
    gres: str | None,
    keep_done: bool,
) -> str:
    gpu = any(t.needs_gpu for t in tasks)
    cpus = element_cpus(tasks, options)
    array = f"0-{len(chunks) - 1}" + (f"%{options.max_running}" if options.max_running else "")
    jobs = [] if "--jobs" in options.batch_args else ["--jobs", str(element_jobs(tasks, cpus))]
    batch = [
        options.python,
        "-m",
        BATCH_MODULE,
        str(submissions),
        "--out",
        str(out),
        "--no-collect",
        *[a for t in task_ids for a in ("--task", t)],
        *jobs,
        *options.batch_args,
        *(["--keep-done"] if keep_done else []),
    ]
    largest = max(len(c) for c in chunks)
    per = seconds_per_submission(tasks, options.timeout_scale)
    return f"""#!/bin/bash
# The kit's class grading on Slurm, written by grader/classroom/slurm.py ({time.strftime("%Y-%m-%d %H:%M:%S %Z")}).
# One array element per chunk of submissions ({len(chunks)} chunk(s) of at most {largest}); element n
# grades the ids listed in {run_dir}/chunks/n.txt{"; requeued, it skips those already graded" if keep_done else ""}.
# Tasks graded: {", ".join(t.id for t in tasks)}{"" if gpu else " (CPU only: no GPU asked for)"}.
# Time limit {time_limit}: {per:.0f} s per submission (the registry's [task.grading] timeout_s of every task
# graded{", the CUDA builds" if gpu else ""} and the batch's overhead) x {largest} + {ELEMENT_MARGIN_S} s.
#SBATCH --job-name=kit-grade
#SBATCH --array={array}
#SBATCH --output={run_dir}/logs/grade_%A_%a.log
#SBATCH --time={time_limit}
#SBATCH --cpus-per-task={cpus}
{_directives([("gres", gres), ("partition", options.partition), ("account", options.account)])}
set -euo pipefail
cd {_q(REPO_ROOT)}
export PYTHONPATH={_q(REPO_ROOT)}${{PYTHONPATH:+:$PYTHONPATH}}
mapfile -t IDS < {_q(run_dir)}/chunks/"$SLURM_ARRAY_TASK_ID".txt
echo "kit: array element $SLURM_ARRAY_TASK_ID of job $SLURM_ARRAY_JOB_ID on $(hostname)" \\
     "(GPUs: ${{CUDA_VISIBLE_DEVICES:-none}}): ${{#IDS[@]}} submission(s): ${{IDS[*]}}"
exec {" ".join(map(_q, batch))} --only "${{IDS[@]}}"
"""


def collect_script(*, submissions: Path, out: Path, run_dir: Path, options: SlurmOptions) -> str:
    command = [
        options.python,
        "-m",
        BATCH_MODULE,
        str(submissions),
        "--out",
        str(out),
        "--collect-only",
        *options.collect_args,
    ]
    return f"""#!/bin/bash
# The collect step of the kit's class grading, written by grader/classroom/slurm.py: it runs after every element of
# the grading array has ended (afterany: failed ones too) and merges the per-submission results into the
# class outputs. What an element could not grade stays missing; submitting again grades only that.
#SBATCH --job-name=kit-collect
#SBATCH --output={run_dir}/logs/collect_%j.log
#SBATCH --time={COLLECT_TIME}
#SBATCH --cpus-per-task=1
{_directives([("partition", options.partition), ("account", options.account)])}
set -euo pipefail
cd {_q(REPO_ROOT)}
export PYTHONPATH={_q(REPO_ROOT)}${{PYTHONPATH:+:$PYTHONPATH}}
exec {" ".join(map(_q, command))}
"""
