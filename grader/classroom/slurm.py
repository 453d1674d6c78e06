"""Grade a class on a Slurm cluster: one job array, one array element per chunk of submissions, then a
collect job.

    python -m grader.classroom.batch SUBMISSIONS --out OUT --slurm [--chunk-size 8] [--partition gpu] [--account X]
    make grade-all SUBMISSIONS=dir OUT=dir SLURM=1

``submit`` asks the batch which submissions still need grading (``grader.classroom.contract.pending``: new, changed,
or graded by another grader version), splits them into chunks, and writes one folder per submission
round under ``OUT/slurm/``: the array's script ``grade.sbatch`` (every ``#SBATCH`` line in plain sight),
one file of ids per chunk (``chunks/<n>.txt``, read by the element whose ``SLURM_ARRAY_TASK_ID`` is n),
the collect job's script ``collect.sbatch``, the exact sbatch commands (``submit.sh``) and the jobs'
logs. Each element runs ``python -m grader.classroom.batch SUBMISSIONS --out OUT --only <its ids> --no-collect``;
the collect job (``--dependency=afterany:<array>``, so it runs whatever failed) runs
``--collect-only`` and writes the class outputs. After failures (a node lost, a time limit hit), the
same command submits again only what is still missing. ``--gres=gpu:1`` is asked for only when a GPU
task is graded; the time limit comes from the registry (``[task.grading] timeout_s`` of each task
graded, per submission, times the chunk's size, plus a margin), so no element is killed while a
submission that uses every second it is allowed still runs. The elements derive each student's hidden seeds from
the course's salt (grader/grade/seeds.py): the registry's, on the shared disk, or ``KIT_GRADING_SALT`` in the shell that
submits (sbatch passes its environment on); the batch refuses to submit without one.

    python -m grader.classroom.slurm status OUT       what the last round submitted, what is still queued, what is left
    python -m grader.classroom.slurm collect SUBMISSIONS --out OUT     the collect step, here and now

A single-node Slurm to try this on (CI runs it): grader/classroom/slurm_local.py.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from assignment.atomic import write_atomic
from assignment.registry import Registry, load_registry
from grader.classroom import contract
from grader.classroom.slurm_jobs import (  # noqa: F401 - the jobs' plan, where the kit has always found it
    BATCH_MODULE,
    COLLECT_TIME,
    CORES_PER_WORKER,
    DEFAULT_CHUNK_SIZE,
    ELEMENT_MARGIN_S,
    SlurmOptions,
    chunked,
    collect_script,
    default_gres,
    element_cpus,
    element_jobs,
    grade_script,
    graded_tasks,
    seconds_per_submission,
    slurm_time,
    time_limit_s,
)


class SlurmError(RuntimeError):
    """Slurm cannot take the job (no sbatch, a refused submission); the message says what to do."""


@dataclass
class SlurmRound:
    """What one ``submit`` did."""

    submissions: str
    out: str
    run_dir: str
    ids: list[str]
    chunks: list[list[str]]
    array_job: str | None = None
    collect_job: str | None = None
    time_limit: str = ""
    gres: str | None = None
    commands: list[list[str]] = field(default_factory=list)
    collected_here: bool = False
    states: dict[str, str] = field(default_factory=dict)  # with --wait: each job's final state


# --------------------------------------------------------------------------------------------------
# Talking to Slurm.


def _require(program: str) -> str:
    path = shutil.which(program)
    if not path:
        raise SlurmError(
            f"{program} is not on PATH: submit from a Slurm login node (or try the flow on this "
            "machine with a local Slurm: python -m grader.classroom.slurm_local start "
            "--dir /tmp/kit-slurm)"
        )
    return path


def sbatch(argv: list[str], script: Path) -> str:
    """Submit ``script``; the job id (``--parsable``: ``id`` or ``id;cluster``)."""
    command = [_require("sbatch"), "--parsable", *argv, str(script)]
    proc = subprocess.run(command, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    job = lines[-1].split(";")[0] if lines and lines[-1].split(";")[0].isdigit() else None
    if proc.returncode != 0 or not job:
        raise SlurmError(
            f"sbatch refused {script.name} (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()}\n  command: {shlex.join(command)}"
        )
    return job


def max_array_size() -> int | None:
    """The cluster's MaxArraySize (array indices must stay below it), or None when scontrol cannot say."""
    if not shutil.which("scontrol"):
        return None
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MaxArraySize" and value.strip().isdigit():
            return int(value.strip())
    return None


def queued(job_ids: list[str]) -> list[str]:
    """Which of these jobs Slurm still has pending or running (array elements as ``id_n``)."""
    job_ids = [j for j in job_ids if j]
    if not job_ids or not shutil.which("squeue"):
        return []
    proc = subprocess.run(
        ["squeue", "--noheader", "--array", f"--jobs={','.join(job_ids)}", "--format=%i %T"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        if "invalid job id" in proc.stderr.lower():  # purged from the controller's memory: long ended
            return []
        raise SlurmError(f"squeue failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def job_states(job_id: str) -> dict[str, str]:
    """Each job (or array element, as ``id_n``) of ``job_id`` with its state (COMPLETED, FAILED, TIMEOUT, ...),
    while the controller still remembers it (MinJobAge: 300 s by default)."""
    if not shutil.which("scontrol"):
        return {}
    proc = subprocess.run(["scontrol", "--oneliner", "show", "job", job_id], capture_output=True, text=True)
    states = {}
    for line in proc.stdout.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "JobState" not in fields:
            continue
        task = fields.get("ArrayTaskId")
        name = f"{fields.get('ArrayJobId', fields.get('JobId'))}_{task}" if task else fields.get("JobId", job_id)
        states[name] = fields["JobState"]
    return states


def wait_for(job_ids: list[str], log=print, poll_s: float = 2.0, slow_after_s: float = 120.0) -> None:
    """Return when none of these jobs is queued or running: every ``poll_s`` seconds at first, every 10 s after
    ``slow_after_s`` (a busy controller is not asked more than it needs to be)."""
    start = time.monotonic()
    last = None
    while True:
        still = queued(job_ids)
        if not still:
            return
        if len(still) != last:
            log(f"slurm: waiting for {len(still)} job(s) ({', '.join(still[:6])}{' ...' if len(still) > 6 else ''})")
            last = len(still)
        time.sleep(poll_s if time.monotonic() - start < slow_after_s else 10.0)


# --------------------------------------------------------------------------------------------------


def last_round(out: Path) -> dict | None:
    try:
        return json.loads((Path(out) / "slurm" / "last.json").read_text())
    except (OSError, ValueError):
        return None


def submit(
    submissions: Path | str,
    out: Path | str,
    *,
    tasks: tuple[str, ...] | list[str] = (),
    only: tuple[str, ...] | list[str] = (),
    options: SlurmOptions | None = None,
    registry: Registry | None = None,
    log=print,
) -> SlurmRound:
    """Submit the grading of what is still pending (of ``only``, when given) as a job array, and the collect
    job after it. Nothing pending: collect here and now (no job)."""
    options = options or SlurmOptions()
    registry = registry or load_registry()
    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    task_ids = tuple(tasks)
    graded = graded_tasks(registry, task_ids)
    _require("sbatch")
    found = contract.discover(submissions)
    if only:  # named students are graded again even when done (as the batch's --only)
        known = {s.id for s in found}
        unknown = [i for i in only if i not in known]
        if unknown:
            raise SlurmError(f"--only names no submission in {submissions}: {', '.join(unknown)}")
        todo = [s.id for s in found if s.id in set(only)]
    else:
        todo = list(contract.pending(found, out))
    previous = last_round(out)
    if previous and not options.force:
        still = queued([previous.get("array_job"), previous.get("collect_job")])
        if still:
            raise SlurmError(
                f"the last round's jobs are still queued or running ({', '.join(still[:8])}"
                f"{' ...' if len(still) > 8 else ''}): wait for them (python -m "
                f"grader.classroom.slurm status {out}), cancel them (scancel "
                f"{previous.get('array_job')}), or pass --force"
            )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = out / "slurm" / stamp
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = out / "slurm" / f"{stamp}-{n}"
    result = SlurmRound(
        submissions=str(submissions),
        out=str(out),
        run_dir=str(run_dir),
        ids=todo,
        chunks=chunked(todo, options.chunk_size),
    )
    if not todo:
        log(f"slurm: every submission of {submissions} is graded with this grader ({len(found)}): nothing to submit")
        if options.collect:
            contract.collect(submissions, out)
            result.collected_here = True
            log(f"slurm: collected the class outputs here, in {out}")
        return result
    limit = max_array_size()
    if limit is not None and len(result.chunks) > limit - 1:
        raise SlurmError(
            f"{len(result.chunks)} chunks exceed the cluster's MaxArraySize ({limit}): raise "
            f"--chunk-size to at least {math.ceil(len(todo) / (limit - 1))}"
        )
    (run_dir / "chunks").mkdir(parents=True)
    (run_dir / "logs").mkdir()
    for index, chunk in enumerate(result.chunks):
        write_atomic(run_dir / "chunks" / f"{index}.txt", "".join(f"{i}\n" for i in chunk))
    result.gres = options.gres if options.gres is not None else default_gres(graded)
    result.gres = result.gres or None
    result.time_limit = slurm_time(time_limit_s(graded, max(len(c) for c in result.chunks), options.timeout_scale))
    grade = run_dir / "grade.sbatch"
    write_atomic(
        grade,
        grade_script(
            submissions=submissions,
            out=out,
            run_dir=run_dir,
            chunks=result.chunks,
            tasks=graded,
            task_ids=task_ids,
            options=options,
            time_limit=result.time_limit,
            gres=result.gres,
            keep_done=not only,
        ),
    )
    extra = list(options.sbatch_args)
    collect = run_dir / "collect.sbatch"
    if options.collect:
        write_atomic(collect, collect_script(submissions=submissions, out=out, run_dir=run_dir, options=options))
    _write_submit_sh(run_dir, extra, grade, extra if options.collect else None, collect)
    log(
        f"slurm: {len(todo)} submission(s) to grade "
        + ("(named with --only), " if only else f"({len(found) - len(todo)} already graded), ")
        + f"{len(result.chunks)} chunk(s) of up to {options.chunk_size}, time limit {result.time_limit}, "
        f"{'gres ' + result.gres if result.gres else 'no GPU'}; script {grade}"
    )
    result.commands.append(["sbatch", "--parsable", *extra, str(grade)])
    try:
        result.array_job = sbatch(extra, grade)
    finally:
        _save(out, result)
    log(f"slurm: array job {result.array_job} submitted (logs: {run_dir / 'logs'})")
    if options.collect:
        collect_argv = [*extra, f"--dependency=afterany:{result.array_job}"]
        result.commands.append(["sbatch", "--parsable", *collect_argv, str(collect)])
        try:
            result.collect_job = sbatch(collect_argv, collect)
        finally:
            _save(out, result)
        log(f"slurm: collect job {result.collect_job} submitted (runs after {result.array_job}, ok or not)")
    if options.wait:
        wait_for([result.array_job, result.collect_job], log)
        result.states = {
            **job_states(result.array_job),
            **(job_states(result.collect_job) if result.collect_job else {}),
        }
        _save(out, result)
        failed = {job: state for job, state in result.states.items() if state != "COMPLETED"}
        if failed:
            raise SlurmError(
                f"the round has ended, and not every job completed: "
                f"{', '.join(f'{j} {s}' for j, s in failed.items())} (logs: {run_dir / 'logs'}); "
                "submitting again grades what is missing"
            )
        log(f"slurm: the round has ended; {len(result.states)} job(s) completed")
    return result


def _write_submit_sh(
    run_dir: Path, array_argv: list[str], grade: Path, collect_argv: list[str] | None, collect: Path
) -> None:
    """The round's sbatch commands as a script an instructor can read (or run again by hand)."""
    lines = [
        "#!/bin/bash",
        "# The sbatch commands grader/classroom/slurm.py ran for this round.",
        "set -euo pipefail",
        f"ARRAY=$({shlex.join(['sbatch', '--parsable', *array_argv, str(grade)])})",
        'echo "array job $ARRAY"',
    ]
    if collect_argv is not None:
        lines.append(
            f'{shlex.join(["sbatch", "--parsable", *collect_argv])} --dependency=afterany:"$ARRAY" '
            f"{shlex.quote(str(collect))}"
        )
    write_atomic(run_dir / "submit.sh", "\n".join(lines) + "\n")


def _save(out: Path, result: SlurmRound) -> None:
    record = asdict(result)
    write_atomic(Path(result.run_dir) / "round.json", json.dumps(record, indent=2))
    write_atomic(out / "slurm" / "last.json", json.dumps(record, indent=2))


# --------------------------------------------------------------------------------------------------
# Command line: status and collect (submitting goes through python -m grader.classroom.batch --slurm).


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Slurm options, for grader.classroom.batch's parser (with ``--slurm``) and this module's ``submit``."""
    group = parser.add_argument_group("Slurm (with --slurm)")
    group.add_argument(
        "--chunk-size",
        type=int,
        default=DEFAULT_CHUNK_SIZE,
        help=f"submissions per array element (default {DEFAULT_CHUNK_SIZE})",
    )
    group.add_argument("--partition", default=None, help="sbatch --partition")
    group.add_argument("--account", default=None, help="sbatch --account")
    group.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra sbatch argument, e.g. --sbatch-arg=--qos=high (repeatable)",
    )
    group.add_argument(
        "--gres",
        default=None,
        help="per element (default gpu:1 when a GPU task is graded, none otherwise; '' for none)",
    )
    group.add_argument(
        "--cpus-per-task",
        type=int,
        default=None,
        help=f"per element (default {2 * CORES_PER_WORKER} with a GPU task, else {CORES_PER_WORKER})",
    )
    group.add_argument("--max-running", type=int, default=None, help="at most this many elements at once")
    group.add_argument(
        "--no-collect-job",
        action="store_true",
        help="no dependent collect job (run python -m grader.classroom.slurm collect yourself)",
    )
    group.add_argument("--wait", action="store_true", help="return when the jobs have ended")
    group.add_argument("--force", action="store_true", help="submit although the last round still runs")


def options_from_args(args: argparse.Namespace, batch_args: tuple[str, ...] = ()) -> SlurmOptions:
    extra = tuple(a for arg in args.sbatch_arg for a in shlex.split(arg))
    collect_args: list[str] = []
    if getattr(args, "due", None):
        collect_args += ["--due", args.due]
    if getattr(args, "roster", None):
        collect_args += ["--roster", str(Path(args.roster).resolve())]
    return SlurmOptions(
        chunk_size=args.chunk_size,
        partition=args.partition,
        account=args.account,
        sbatch_args=extra,
        gres=args.gres,
        cpus_per_task=args.cpus_per_task,
        max_running=args.max_running,
        collect=not args.no_collect_job,
        wait=args.wait,
        batch_args=tuple(batch_args),
        collect_args=tuple(collect_args),
        timeout_scale=getattr(args, "timeout_scale", 1.0),
        force=args.force,
    )


def status(out: Path, log=print) -> int:
    previous = last_round(out)
    if not previous:
        log(f"no Slurm round was submitted for {out}")
        return 1
    log(
        f"last round: {previous['run_dir']}: {len(previous['ids'])} submission(s) in {len(previous['chunks'])} "
        f"chunk(s); array job {previous.get('array_job')}, collect job {previous.get('collect_job')}"
    )
    still = queued([previous.get("array_job"), previous.get("collect_job")])
    log(f"still queued or running: {', '.join(still)}" if still else "none of its jobs is queued or running")
    left = contract.pending(Path(previous["submissions"]), out)
    shown = f" ({', '.join(left[:10])}{' ...' if len(left) > 10 else ''})" if left else ""
    log(f"not graded with this grader yet: {len(left)}{shown}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The kit's class grading on Slurm. Submit with python -m "
        "grader.classroom.batch SUBMISSIONS --out OUT --slurm "
        "(make grade-all ... SLURM=1)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_status = sub.add_parser("status", help="the last round's jobs, and what is still to grade")
    p_status.add_argument("out", type=Path)
    p_collect = sub.add_parser("collect", help="merge the per-submission results into the class outputs, here")
    p_collect.add_argument("submissions", type=Path)
    p_collect.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "status":
        return status(args.out)
    contract.collect(args.submissions, args.out)
    print(f"collected the class outputs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
