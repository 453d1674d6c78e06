"""Grade a whole class: ``python -m grader.classroom.batch SUBMISSIONS --out OUT`` (``make grade-all``).

    python -m grader.classroom.batch SUBMISSIONS --out OUT [--gpus 0,1] [--jobs N] [--only ID ...] [--task t1 ...]
                           [--no-collect] [--collect-only] [--slurm ...] [grading options]

SUBMISSIONS is a folder with one folder or ``.zip`` per student (named by the student id), or a
Gradescope export (``submission_metadata.yml`` and ``submission_<n>/`` folders): see grader/classroom/roster.py.
Each submission gets, in ``OUT/students/<id>/``, what ``make grade`` writes (results.json, report.html,
grades.csv, grading.json) and a done-marker; the class outputs go to ``OUT/class/``
(grader/classroom/class_outputs.py). ``--task theory`` grades the theory answers (alone, or beside the tasks named).

**Seeds.** Each task's hidden seed is derived from the course's salt and the submission's student: its first
submitter's SID, else their email, else its folder's name (grader/grade/seeds.py), so a rerun, a resumed batch or a
regrade draws the same inputs and gives the same points; ``--seed`` gives every submission one seed instead. The
batch refuses to start without a usable salt, and a new salt grades every submission again.

**Workers** (grader/classroom/batch_queue.py). One worker per GPU (``--gpus``; default every GPU this process
sees), grading the GPU tasks of one submission at a time with only its GPU visible, so timed checks never
share a GPU; and ``--jobs`` CPU workers for the tasks that need no GPU (t1, t7), run beside them with no
GPU visible (``--no-split``: every task on the GPU workers). On a host without a GPU everything is CPU
work. Each lane of a submission runs in a process of its own with a time limit from the registry: a
crash or a hang is recorded as that submission's failure, with the reason, and retried on the next run.

**Host checks.** The host preflight runs once per batch (tools, isolation, the GPUs), not once per
submission; each GPU worker then times the reference on its own GPU and is warned about when it is off
the registry's figure (or the other GPUs) by more than ``SPEED_TOLERANCE``.

**Resume.** A submission is done when its marker's key (a hash of its contents, the grader's version
and the settings that shape a grade: grader/classroom/ledger.py) is this run's: rerunning the same command after
a ``kill -9`` or a reboot skips it. A lane that finished before the kill is kept and reused; results
are written whole (temporary name, then rename) and the marker last, so nothing is half-written and
nothing is graded twice. A changed submission, or a changed grader (hidden tests, registry, reference
solutions), is graded again. ``--only`` regrades the named students (ids, SIDs or emails) even when
done. Two batches on one OUT never grade the same submission at once (a lock per student).

Exit status: 0 every submission graded; 1 some failed (rerun to retry them); 2 bad input; 3 the host
cannot grade (the preflight); 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assignment.registry import Task, load_registry
from grader.classroom import ledger
from grader.classroom.batch_queue import Batch
from grader.classroom.lanes import (
    LANE_OVERHEAD_S,
    Interrupted,
    Lane,
    core_ranges,
    default_jobs,
    grading_args,
    lane_time_limit,
    last_line,
)
from grader.classroom.progress import Progress, duration_text
from grader.classroom.contract import batch_file as _batch_file
from grader.classroom.contract import collect, discover, pending
from grader.classroom.roster import RosterError, Submission, parse_due, scan
from grader.grade import seeds
from grader.grade.config import ISOLATION_CHOICES, REPO_ROOT, THEORY, GradeConfig

# The contract with a driver of the batch (grader/classroom/contract.py: which submissions are pending, the class
# outputs), and its lanes' time limits and resources: re-exported, where they have always been found.
__all__ = ["LANE_OVERHEAD_S", "Lane", "collect", "default_jobs", "discover", "lane_time_limit", "main", "pending"]

# --------------------------------------------------------------------------- host preflight


def host_preflight(tasks: list[Task], config: GradeConfig, skip_preflight: bool) -> dict:
    """The preflight once for the whole batch: on a host with an NVIDIA driver in a child process (the batch itself
    never opens a GPU), elsewhere here."""
    if not any(Path(p).exists() for p in ("/dev/nvidiactl", "/proc/driver/nvidia")):
        from grader.classroom.batch_worker import host_report

        return host_report(tasks, config, skip_preflight)
    with tempfile.TemporaryDirectory(prefix="kit-batch-") as tmp:
        path = Path(tmp) / "host.json"
        cmd = [
            sys.executable,
            "-m",
            "grader.classroom.batch_worker",
            "host",
            "--json",
            str(path),
            *[a for t in tasks for a in ("--task", t.id)],
            *grading_args(config, skip_preflight),
        ]
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        )
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {
                "ok": False,
                "problems": [f"the host check failed: {last_line(proc.stdout + proc.stderr)}"],
                "gpus": [],
                "facts": {},
                "notes": [],
            }


def choose_gpus(option: str | None, seen: list[str]) -> list[str]:
    """CUDA_VISIBLE_DEVICES values, one per GPU worker: --gpus (``0,1``; ``none`` for none), else the GPUs this
    process sees (its own CUDA_VISIBLE_DEVICES entries where set, as under Slurm)."""
    if option is not None:
        return [] if option.strip().lower() in ("", "none") else [g.strip() for g in option.split(",") if g.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip()][: len(seen)]
    return [str(i) for i in range(len(seen))]


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m grader.classroom.batch",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("submissions", type=Path, help="one folder or .zip per student, or a Gradescope export")
    parser.add_argument("--out", type=Path, required=True, help="per-student results and the class outputs")
    parser.add_argument(
        "--gpus",
        default=None,
        help="GPU workers, as CUDA device ids: 0,1 (default: every GPU visible; none: no GPU worker)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="CPU workers for the tasks that need no GPU (default: from the cores left by the GPU workers)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="ID",
        help="grade only these students (submission ids, SIDs or emails), even when done",
    )
    parser.add_argument(
        "--keep-done",
        action="store_true",
        help="with --only: skip those already graded with this grader (a requeued Slurm element)",
    )
    parser.add_argument(
        "--task",
        action="append",
        default=[],
        help=f"grade only these tasks (repeatable; '{THEORY}': the theory answers)",
    )
    parser.add_argument(
        "--no-split", action="store_true", help="grade every task on the GPU workers (t1/t7 also checked on the GPU)"
    )
    parser.add_argument("--no-collect", action="store_true", help="do not write the class outputs at the end")
    parser.add_argument("--collect-only", action="store_true", help="only write the class outputs from what is graded")
    parser.add_argument(
        "--due",
        default=None,
        help="the deadline (ISO 8601) a Gradescope export's :created_at: is compared with for the late flag",
    )
    parser.add_argument(
        "--roster",
        type=Path,
        default=None,
        help="a roster CSV (Name, SID, Email) for a folder of submissions named by SID or email",
    )
    grading = parser.add_argument_group("grading (as python -m grader.grade.grade)")
    grading.add_argument(
        "--seed",
        type=int,
        default=None,
        help="one seed for every submission and task (default: "
        "derived per student and task from the course's salt, grader/grade/seeds.py)",
    )
    grading.add_argument("--isolation", choices=ISOLATION_CHOICES, default="auto")
    grading.add_argument("--allow-weak-isolation", action="store_true")
    grading.add_argument(
        "--skip-preflight",
        action="store_true",
        help="grade although the host fails the preflight (GPU tasks without a GPU: not run)",
    )
    grading.add_argument("--timeout-scale", type=float, default=1.0)
    grading.add_argument(
        "--select",
        default="",
        help="only the hidden checks matching this pytest -k expression "
        "(a targeted regrade; the results then hold only those)",
    )
    grading.add_argument(
        "--theory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="grade the theory answers (default: when every task is graded, not with --task)",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="submit the grading as a Slurm job array (grader/classroom/slurm.py) instead of grading here",
    )
    try:
        from grader.classroom import slurm
    except ModuleNotFoundError as exc:
        if exc.name != "grader.classroom.slurm":
            raise
    else:
        slurm.add_arguments(parser)
    return parser


def passthrough_args(args: argparse.Namespace) -> list[str]:
    """The options each Slurm element's ``python -m grader.classroom.batch`` needs to grade as this command would."""
    out = ["--isolation", args.isolation, "--timeout-scale", repr(args.timeout_scale)]
    out += ["--allow-weak-isolation"] * args.allow_weak_isolation + ["--skip-preflight"] * args.skip_preflight
    out += ["--no-split"] * args.no_split + (["--select", args.select] if args.select else [])
    out += ["--seed", str(args.seed)] if args.seed is not None else []
    out += ["--jobs", str(args.jobs)] if args.jobs is not None else []
    out += [] if args.theory is None else ["--theory" if args.theory else "--no-theory"]
    return out


def _slurm(args: argparse.Namespace, ids: list[str] | None) -> int:
    try:
        from grader.classroom import slurm
    except ModuleNotFoundError as exc:
        if exc.name != "grader.classroom.slurm":
            raise
        print("error: --slurm needs grader/classroom/slurm.py, which this kit does not have", file=sys.stderr)
        return 2
    try:
        slurm.submit(
            args.submissions,
            args.out,
            tasks=tuple(args.task),
            only=tuple(ids or ()),
            options=slurm.options_from_args(args, tuple(passthrough_args(args))),
        )
    except slurm.SlurmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _save_options(args: argparse.Namespace) -> None:
    path = _batch_file(args.out)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    saved.update(
        {
            "submissions": str(args.submissions.resolve()),
            "due": args.due if args.due is not None else saved.get("due"),
            "roster": str(args.roster.resolve()) if args.roster else saved.get("roster"),
        }
    )
    ledger.write_json(path, saved)


def _select_only(only: list[str], subs: list[Submission]) -> tuple[list[str], list[str]]:
    chosen, unknown = [], []
    for key in only:
        hits = [s.id for s in subs if s.matches(key)]
        (chosen.extend(hits) if hits else unknown.append(key))
    return sorted(set(chosen)), unknown


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    registry = load_registry()
    if THEORY in args.task and registry.theory is None:
        print(f"error: --task {THEORY}: the registry has no [theory] part", file=sys.stderr)
        return 2
    try:
        named = [registry.task(t) for t in args.task if t != THEORY]
        tasks = named if args.task else list(registry.available)
        due = parse_due(args.due) if args.due else None
        roster = scan(args.submissions, due=due, roster_csv=args.roster)
    except (KeyError, RosterError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    out_resolved = args.out.resolve()
    subs = [
        s
        for s in roster.submissions
        if out_resolved != Path(s.path).resolve() and not out_resolved.is_relative_to(Path(s.path).resolve())
    ]
    for problem in roster.problems:
        print(f"warning: {problem}", file=sys.stderr)
    if len(subs) < len(roster.submissions):
        print(f"warning: {args.out} lies inside {args.submissions}: not graded as a submission", file=sys.stderr)
    _save_options(args)
    if args.collect_only:
        return _collect(args, subs, roster.problems)
    if not subs:
        print(
            f"error: {args.submissions}: no submissions in it (expected one folder or .zip per student, or a "
            "Gradescope export)",
            file=sys.stderr,
        )
        return 2
    ids = None
    if args.only:
        ids, unknown = _select_only(args.only, subs)
        if unknown:
            print(f"warning: --only: no submission matches {', '.join(unknown)}", file=sys.stderr)
        if not ids:
            print("error: --only matches no submission", file=sys.stderr)
            return 2
    try:  # before anything is submitted or graded: without a salt no seed can be derived
        seeding = seeds.settings_key(registry, args.seed)
    except seeds.SaltError as exc:
        print(f"error: {exc}; nothing was graded", file=sys.stderr)
        return 3
    if args.slurm:
        return _slurm(args, ids)
    config = GradeConfig(
        tasks=tuple(t.id for t in tasks),
        isolation=args.isolation,
        allow_weak_isolation=args.allow_weak_isolation,
        timeout_scale=args.timeout_scale,
        select=args.select,
    )
    host = host_preflight(tasks, config, args.skip_preflight)
    for note in host.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    if not host.get("ok"):
        for problem in host.get("problems", []):
            print(f"PROBLEM: {problem}", file=sys.stderr)
        print("error: this host cannot grade (the preflight above); nothing was graded", file=sys.stderr)
        return 3
    gpus = choose_gpus(args.gpus, host.get("gpus", []))
    gpu_names = dict(zip(gpus, host.get("gpus", [])))
    jobs = args.jobs if args.jobs is not None else default_jobs(gpus)
    gpu_tasks = [t.id for t in tasks if t.needs_gpu]
    if gpu_tasks and not gpus and host.get("gpus") and not args.skip_preflight:
        print(
            f"error: {', '.join(gpu_tasks)} need a GPU worker and GPUS= (--gpus) gives none: name GPUs with "
            'GPUS=0,1, grade the others with TASKS="..." (--task), or report them as not run with '
            "GRADE_FLAGS=--skip-preflight",
            file=sys.stderr,
        )
        return 3
    theory = getattr(registry, "theory", None) is not None and (  # as make grade decides (grader/grade/grade.py)
        args.theory if args.theory is not None else not args.task or THEORY in args.task
    )
    batch = Batch(
        subs,
        args.out,
        registry,
        tasks,
        config,
        gpus=gpus,
        jobs=jobs,
        split=not args.no_split,
        skip_preflight=args.skip_preflight,
        seed=args.seed,
        host_facts=host.get("facts", {}),
        gpu_names=gpu_names,
        theory=theory,
        seeding=seeding,
    )
    todo = batch.plan(ids, args.keep_done)
    problems = batch.check_gpus() if todo else []  # a minute of reference timing: only when there is work
    for problem in problems:
        print(f"{'warning' if args.skip_preflight else 'PROBLEM'}: {problem}", file=sys.stderr)
    if todo and any(lane.name == "gpu" for lane in batch.lanes) and not any(w.kind == "gpu" for w in batch.workers):
        print("error: no GPU passed its check; nothing was graded", file=sys.stderr)
        return 3
    describe = ", ".join(f"{lane.name}: {' '.join(lane.ids)}" for lane in batch.lanes)
    workers = ", ".join(w.describe() for w in batch.workers if w.kind == "gpu")
    cpus = [w for w in batch.workers if w.kind == "cpu"]
    if cpus:
        workers += (
            (", " if workers else "")
            + f"{len(cpus)} CPU worker(s)"
            + (f" on cores {core_ranges(cpus[0].cores)}" if cpus[0].cores else "")
            + f", {cpus[0].threads} thread(s) each"
        )
    print(
        f"{len(subs)} submission(s) in {args.submissions} ({roster.layout}); {len(todo)} to grade, "
        f"{batch.counts['skipped']} already graded with this grader ({batch.version}).\n"
        f"lanes: {describe}; workers: {workers}; isolation: {host.get('facts', {}).get('isolation', '?')}",
        flush=True,
    )
    start = time.monotonic()
    progress = Progress(len(todo))
    status = 0

    def stop(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        batch.run(todo, progress)
    except Interrupted as exc:
        status = 130
        batch.stop()
        progress.close()
        print(
            f"\ninterrupted ({exc}): {batch.counts['graded']} graded this run; rerun the same command to resume",
            file=sys.stderr,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        progress.close()
    _record_run(args, batch, start, status)
    if status:
        return status
    counts = batch.counts
    per = f" ({duration_text(sum(batch.walls) / len(batch.walls))} of worker time each)" if batch.walls else ""
    print(
        f"graded {counts['graded']}{per}, failed {counts['failed']}, skipped {counts['skipped']} (already graded)"
        + (f", left to another batch {counts['locked']}" if counts["locked"] else "")
        + f" in {duration_text(time.monotonic() - start)}"
    )
    if counts["failed"]:
        print(
            f"{counts['failed']} failed: their reasons are in {args.out}/students/<id>/failed.json; "
            "rerun the same command to retry them"
        )
    if not args.no_collect:
        _collect(args, subs, roster.problems)
    return 1 if counts["failed"] else 0


def _collect(args: argparse.Namespace, subs: list[Submission], problems: list[str]) -> int:
    from grader.classroom.class_outputs import CLASS_DIR, write_class_outputs

    summary = write_class_outputs(subs, args.out, problems=problems)
    counts = summary["counts"]
    print(
        f"class outputs in {args.out / CLASS_DIR}: summary.html, gradebook.csv, gradescope_scores.csv (and "
        f"gradescope_gpu_scores.csv: the GPU tasks alone), pass_rates.csv, leaderboard.csv ({counts['graded']} graded, {counts['unreadable']} unreadable, "
        f"{counts['stale']} stale, {counts['failed']} failed, {counts['pending']} not graded)"
    )
    return 0


def _record_run(args, batch: Batch, start: float, status: int) -> None:
    line = {
        "run": batch.run_id,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - (time.monotonic() - start))),
        "wall_s": round(time.monotonic() - start, 1),
        "host": platform.node(),
        "grader_version": batch.version,
        "settings": batch.settings,
        "counts": batch.counts,
        "exit": status,
        "workers": [w.name for w in batch.workers],
        "argv": shlex.join(sys.argv[1:]),
    }
    path = args.out / "runs.jsonl"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    sys.exit(main())
