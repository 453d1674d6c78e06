"""Grade one submission: ``python -m grader.grade.grade <dir or .zip> --out <dir>``.

The phases, one module each: preflight (is this host fit to grade?), collect (copy the student's
files out of the submission, safely), prepare (check, splice and build each task's files), run (each
task's hidden suite in its own checker process; student Python in a sandboxed worker), score (the theory
answers too, grader/grade/theory.py, when every task is graded or ``--task theory`` asks for them), and report
(Gradescope results.json, grades.csv and report.html for the student; grading.json for the instructor:
isolation level, each task's seed and how it was derived, host, review flags, each task's log).

Each task's hidden seed is derived from the course's salt, the submission's grading id and the task
(grader/grade/seeds.py), so a regrade of the same files gets the same points; ``--seed`` gives every task one seed
instead. Exits 0 even when the submission scores zero; 2 when the submission cannot be read; 3 when the host
fails the preflight or there is no salt to derive the seeds from.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from assignment.registry import Registry, load_registry
from assignment.theory import answers as theory_answers
from grader.grade import pace, seeds
from grader.grade.config import ISOLATION_CHOICES, REPO_ROOT, THEORY, GradeConfig
from grader.grade.preflight import Preflight, isolation_check, run_preflight
from grader.grade.prepare import prepare
from grader.grade.report import OPT_IN_FILE, leaderboard_alias, phases_text, summary_lines, total_line, write_all
from grader.grade.phases import run_tasks
from grader.grade.runner import TaskRun, gpu_available
from grader.grade.scoring import SubmissionScore, score_task
from grader.grade.submission import SubmissionError, collect
from grader.grade.theory import grade_theory
from grader.isolation.client import WorkerConfig
from grader.isolation.sandbox import Limits


class PreflightError(RuntimeError):
    """The host cannot grade what was asked; the message lists every problem."""


def selected_tasks(config: GradeConfig, registry: Registry):
    ids = [t for t in config.tasks if t != THEORY]
    return [registry.task(t) for t in ids] if config.tasks else list(registry.available)


def _worker_config(prepared, student_dir: Path, host: Preflight, config: GradeConfig, out: Path) -> WorkerConfig | None:
    """The sandboxed worker of a task with Python files (None: the task has none). Its per-call deadline is the task's
    per-check one; the checker scales it by the host's pace."""
    task = prepared.task
    if not prepared.python_files:
        return None
    return WorkerConfig(
        student_dir=student_dir,
        isolation=host.isolation,
        bwrap=config.bwrap,
        call_timeout_s=task.grading.test_deadline_s,
        forbidden=task.rules.forbidden,
        deny=(str(REPO_ROOT), str(out.resolve()), str(config.cache_root)),
        limits=Limits(threads=config.threads) if config.threads else Limits(),
    )


def grades_theory(config: GradeConfig, registry: Registry) -> bool:
    """The theory answers are graded with every task or when asked (``--theory``, or ``theory`` among the tasks),
    not in a regrade of some tasks."""
    if registry.theory is None:
        return False
    return config.theory if config.theory is not None else not config.tasks or THEORY in config.tasks


def grading_identity(config: GradeConfig, registry: Registry, extra: dict[str, bytes], source: Path) -> tuple[str, str]:
    """(who the submission belongs to, where that came from): the hidden seeds' grading id (grader/grade/seeds.py)."""
    if config.grading_id:
        return config.grading_id, "the grader's caller (the class roster or Gradescope's submitter)"
    if config.student_id:
        return config.student_id, "--student-id"
    answers = registry.theory.answers_file if registry.theory else None
    if answers and extra.get(answers) is not None:
        try:
            recorded = theory_answers.parse(extra[answers].decode("utf-8"), answers).student_id
        except (UnicodeDecodeError, theory_answers.AnswersError):
            recorded = None
        if recorded and recorded.strip():
            return recorded, f"the student_id of {answers}"
    return submission_name(source), "the submission's name"


def submission_name(source: Path) -> str:
    """A submission's own name, as the class roster names it: the folder, or the .zip without its suffix."""
    return source.stem if source.is_file() else source.name


def check_host(config: GradeConfig, registry: Registry) -> Preflight:
    """The preflight (or, without it, just the isolation decision); raises PreflightError on a problem."""
    tasks = selected_tasks(config, registry)
    result = run_preflight(tasks, config) if config.preflight else isolation_check(tasks, config)
    if not result.ok:
        raise PreflightError("this host cannot grade: " + "; ".join(result.problems))
    return result


def grade_submission(
    source: Path,
    out: Path,
    config: GradeConfig | None = None,
    registry: Registry | None = None,
    log=print,
    host: Preflight | None = None,
) -> SubmissionScore:
    start = time.monotonic()  # total_s: the whole grading, the host's checks included
    config = config or GradeConfig()
    registry = registry or load_registry()
    if config.seed is None:
        try:
            seeds.resolve_salt(registry)  # before any work: without a salt there is no seed to grade with
        except seeds.SaltError as exc:
            raise PreflightError(str(exc)) from None
    host = host or check_host(config, registry)
    tasks = selected_tasks(config, registry)
    has_gpu = gpu_available()
    phases: dict[str, float] = {"host_s": time.monotonic() - start}
    started_at = time.time()  # the checks' own clock (grading.json's timelines count from it)
    # How busy this host is now: every deadline of this grading is scaled by it (grader/grade/pace.py).
    pace_factor, probe_ms = pace.measure(config.pace_reference_ms) if config.pace else (1.0, None)
    scale = config.timeout_scale * pace_factor
    out = Path(out)
    graded_theory = grades_theory(config, registry)
    # The theory answers are read even when not graded (their student_id names the submission), and the leaderboard
    # opt-in; neither is ever put where student code runs.
    extra_files = ((registry.theory.answers_file,) if registry.theory else ()) + (OPT_IN_FILE,)
    with tempfile.TemporaryDirectory(prefix="kit-grade-", dir=config.work_root) as tmp:
        workdir = Path(tmp)
        try:
            collected = collect(Path(source), workdir, registry, extra_files=extra_files)
        except SubmissionError as exc:
            theory = grade_theory(None, registry, config.student_id, absent=str(exc)) if graded_theory else None
            plan = _seed_plan(config, registry, tasks, {}, Path(source))
            return _unreadable(Path(source), str(exc), tasks, registry, out, plan, host, theory)
        plan = _seed_plan(config, registry, tasks, collected.extra, Path(source))
        # Each task checked, spliced and built, then its checks, the tasks side by side; then each task's timing checks
        # alone on the GPU (grader/grade/phases.py).
        runs, ran = run_tasks(
            tasks,
            lambda task: prepare(task, collected.student_dir, workdir, config, build=has_gpu),
            workdir,
            config,
            {task.id: plan.seed(task.id) for task in tasks},
            lambda item: _worker_config(item, collected.student_dir, host, config, out),
            has_gpu=has_gpu,
            scale=scale,
            log=lambda text: log(f"[grade] {collected.name}: {text}", file=sys.stderr),
        )
        phases.update(ran)
        scores = [score_task(task, run) for task, run in zip(tasks, runs)]
    phase_start = time.monotonic()
    theory = (
        grade_theory(collected.extra.get(registry.theory.answers_file), registry, config.student_id)
        if graded_theory
        else None
    )
    phases["theory_s"] = time.monotonic() - phase_start
    phases["total_s"] = time.monotonic() - start
    grading = {
        "isolation": host.facts.get("isolation", host.isolation),
        "seeds": plan.seeds,
        "seeding": plan.record,
        "pace": {"probe_ms": probe_ms, "deadline_scale": round(scale, 3)},
        "phases": {name: round(seconds, 2) for name, seconds in phases.items()},
        "started_at": round(started_at, 3),
        "host": platform.node(),
        "preflight": host.facts,
        "preflight_notes": host.notes,
        "python": sys.version.split()[0],
        "submission_files": collected.found,
        "leaderboard": leaderboard_alias(collected.extra.get(OPT_IN_FILE)),
    }
    result = SubmissionScore(collected.name, scores, collected.notes, time.monotonic() - start, grading, theory)
    write_all(result, registry, out)
    return result


def _seed_plan(config: GradeConfig, registry: Registry, tasks, extra: dict[str, bytes], source: Path) -> seeds.SeedPlan:
    grading_id, id_from = grading_identity(config, registry, extra, source)
    try:
        return seeds.plan([t.id for t in tasks], registry, fixed=config.seed, grading_id=grading_id, id_from=id_from)
    except seeds.SaltError as exc:  # the salt went between the check above and now (the environment changed)
        raise PreflightError(str(exc)) from None


def _unreadable(
    source: Path, why: str, tasks, registry: Registry, out: Path, plan: seeds.SeedPlan, host: Preflight, theory=None
) -> SubmissionScore:
    """A submission that cannot be read still gets results (zero, with the reason) in every format."""
    scores = [score_task(task, TaskRun(task.id, "unreadable", why)) for task in tasks]
    grading = {
        "isolation": host.facts.get("isolation", host.isolation),
        "seeds": plan.seeds,
        "seeding": plan.record,
        "host": platform.node(),
        "unreadable": why,
    }
    result = SubmissionScore(submission_name(source), scores, [why], 0.0, grading, theory)
    write_all(result, registry, out)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade one submission (a folder or a .zip).")
    parser.add_argument("submission", type=Path)
    parser.add_argument("--out", type=Path, default=Path("build/grade"))
    parser.add_argument(
        "--task",
        action="append",
        default=[],
        help=f"grade only these tasks (repeatable; '{THEORY}': the theory answers)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="one seed for every task's hidden tests (default: "
        "derived per task from the course's salt and the student id)",
    )
    parser.add_argument(
        "--isolation",
        choices=ISOLATION_CHOICES,
        default="auto",
        help="how student Python is isolated (auto: bubblewrap where it runs)",
    )
    parser.add_argument(
        "--allow-weak-isolation",
        action="store_true",
        help="grade even where bubblewrap cannot run (only for code you trust)",
    )
    parser.add_argument(
        "--skip-preflight",
        action="store_true",
        help="grade even on a host that fails the preflight (checks that cannot run are reported not run)",
    )
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every time limit (a slower host)")
    parser.add_argument(
        "--parallel",
        type=int,
        default=None,
        metavar="N",
        help="checker processes at once for the checks of the tasks side by side (default: all of them on a host of "
        "8 cores or more, else the cores but two)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU threads of each checker and of its sandboxed worker (default: the worker's fixed 4, the checker's "
        "share of the cores)",
    )
    parser.add_argument(
        "--student-id",
        help="the submission's student id, which picks its theory questions and its "
        "hidden seeds (default: the student_id in its theory answers file, else its name)",
    )
    parser.add_argument(
        "--theory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="grade the theory answers (default: when every task is graded, not with --task)",
    )
    args = parser.parse_args(argv)
    for name in ("parallel", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    registry = load_registry()
    for task_id in args.task:
        if task_id == THEORY and registry.theory is None:
            parser.error(f"--task {THEORY}: the registry has no [theory] part")
        if task_id != THEORY:
            registry.task(task_id)  # unknown ids fail here, naming the registry
    config = replace(
        GradeConfig(),
        tasks=tuple(args.task),
        seed=args.seed,
        isolation=args.isolation,
        allow_weak_isolation=args.allow_weak_isolation,
        preflight=not args.skip_preflight,
        timeout_scale=args.timeout_scale,
        parallel=args.parallel,
        threads=args.threads,
        theory=args.theory,
        student_id=args.student_id,
    )
    try:
        result = grade_submission(args.submission, args.out, config, registry)
    except PreflightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    print("\n".join(summary_lines(result)))
    print(total_line(result, registry))
    print(f"time: {phases_text(result.grading)}")
    for line in result.review:
        print(f"REVIEW {line}")
    print(
        f"wrote {args.out}/results.json, grades.csv, report.html and grading.json (isolation: "
        f"{result.grading['isolation']})"
    )
    if "unreadable" in result.grading:
        print(f"error: {result.grading['unreadable']}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
