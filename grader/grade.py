"""Grade one submission: ``python -m grader.grade <dir or .zip> --out <dir>``.

Copies the student files into a fresh working directory, runs each available
task's hidden suite in its own child process, scores it through the registry
and writes results.json (Gradescope), grades.csv and report.html. Exits 0 even
when the submission scores zero; exits 2 only when the submission cannot be
read at all.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from assignment.registry import Registry, load_registry
from grader.config import GradeConfig
from grader.report import summary_lines, write_all
from grader.runner import run_task
from grader.scoring import SubmissionScore, score_task
from grader.submission import SubmissionError, collect


def grade_submission(source: Path, out: Path, config: GradeConfig | None = None,
                     registry: Registry | None = None, log=print) -> SubmissionScore:
    config = config or GradeConfig()
    registry = registry or load_registry()
    tasks = [registry.task(t) for t in config.tasks] if config.tasks else list(registry.available)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kit-grade-") as tmp:
        workdir = Path(tmp)
        collected = collect(Path(source), workdir, registry)
        notes = list(collected.notes)
        scores = []
        for task in tasks:
            log(f"[grade] {collected.name}: {task.id} {task.title} ...", file=sys.stderr)
            run = run_task(task, collected.student_dir, workdir, config)
            scores.append(score_task(task, run))
            # Keep the child's log next to the results for the instructor.
            child_log = workdir / f"pytest_{task.id}.log"
            if child_log.is_file():
                (Path(out) / "logs").mkdir(parents=True, exist_ok=True)
                (Path(out) / "logs" / child_log.name).write_bytes(child_log.read_bytes())
    result = SubmissionScore(collected.name, scores, notes, time.monotonic() - start)
    write_all(result, registry, Path(out))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade one submission (a folder or a .zip).")
    parser.add_argument("submission", type=Path)
    parser.add_argument("--out", type=Path, default=Path("build/grade"))
    parser.add_argument("--task", action="append", default=[], help="grade only these tasks (repeatable)")
    parser.add_argument("--seed", type=int, default=None, help="fix the hidden tests' seed (default: drawn now)")
    args = parser.parse_args(argv)
    registry = load_registry()
    for task_id in args.task:
        registry.task(task_id)  # unknown ids fail here, naming the registry
    config = GradeConfig(tasks=tuple(args.task), seed=args.seed)
    try:
        result = grade_submission(args.submission, args.out, config, registry)
    except SubmissionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(result)))
    print(f"total {result.score:.2f} / {result.max_score(registry):g}")
    print(f"wrote {args.out}/results.json, {args.out}/grades.csv, {args.out}/report.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
