"""``make selfcheck``: prove the kit is consistent.

* the reference solutions score full marks on every check this host can run:
  every check and timing rule that ran passed in full; what could not run here
  (a GPU task, or t6's GPU checks, on a host without a GPU; a missing tool) is
  listed as not run with its points, never counted as passed or as failed;
* the starter scores zero on every task, and every one of its failures is a
  clean NotImplementedError from a TODO stub (no import error, no crash).

The verdict says what it could not check here: passing on a host without a GPU
proves the CPU half of the kit only.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from assignment.registry import load_registry
from grader.grade.config import REPO_ROOT, GradeConfig
from grader.grade.grade import check_host, grade_submission


def _starter_failure_problems(task_score) -> list[str]:
    problems = []
    if task_score.status not in ("ran", "not_run"):
        problems.append(f"{task_score.task.id}: starter {task_score.status}: {task_score.reason}")
    for test in task_score.tests:
        if task_score.status == "ran" and test.ran and not test.output.startswith("NotImplementedError"):
            problems.append(
                f"{task_score.task.id}: starter check '{test.name}' did not fail with a "
                f"NotImplementedError: {test.output[:160]}"
            )
    return problems


def run_selfcheck(repeats: int = 1, config: GradeConfig | None = None, starter: bool = True) -> int:
    registry = load_registry()
    # The kit's own code is trusted: grade it with the best isolation this host has, and without the
    # preflight's refusal (GPU tasks on a host without a GPU are reported "not run", never passed).
    config = config or replace(GradeConfig(), allow_weak_isolation=True, preflight=False)
    host = check_host(config, registry)
    print(f"isolation: {host.facts.get('isolation')}")
    rows, problems = [], []
    with tempfile.TemporaryDirectory(prefix="kit-selfcheck-") as tmp:
        for attempt in range(repeats):
            solution = grade_submission(
                REPO_ROOT / "solutions",
                Path(tmp) / f"solutions{attempt}",
                config,
                registry,
                log=lambda *a, **k: None,
                host=host,
            )
            for ts in solution.tasks:
                full = math.isclose(ts.score, ts.max_ran, abs_tol=1e-9)  # full marks of what ran here
                rows.append((f"solutions#{attempt + 1}" if repeats > 1 else "solutions", ts))
                if ts.status == "ran" and not full:
                    failed = [t.name + ": " + t.output for t in ts.tests if t.ran and not t.passed]
                    problems.append(
                        f"{ts.task.id}: solutions scored {ts.score:.2f} of the {ts.max_ran:.2f} that ran "
                        "here: " + "; ".join(failed[:3])
                    )
                elif ts.status not in ("ran", "not_run"):
                    problems.append(f"{ts.task.id}: solutions {ts.status}: {ts.reason}")
        graded_starter = (
            grade_submission(
                REPO_ROOT / "starter", Path(tmp) / "starter", config, registry, log=lambda *a, **k: None, host=host
            )
            if starter
            else None
        )
        for ts in graded_starter.tasks if graded_starter else []:
            rows.append(("starter", ts))
            if ts.score != 0:
                problems.append(f"{ts.task.id}: starter scored {ts.score:.2f}, expected 0")
            problems.extend(_starter_failure_problems(ts))
    print(f"{'implementation':<14} {'task':<4} {'title':<28} {'score':>13}  result")
    for name, ts in rows:
        result = {"ran": f"{ts.passed}/{ts.total} checks passed", "not_run": "NOT RUN"}.get(ts.status, ts.status)
        if ts.status == "ran" and not ts.complete:
            result += f"; {ts.not_run:.2f} points NOT RUN here"
        print(f"{name:<14} {ts.task.id:<4} {ts.task.title[:28]:<28} {ts.score:6.2f} / {ts.max_score:<5g} {result}")
    if problems:
        print("\nselfcheck FAILED:")
        for problem in problems:
            print("  - " + problem)
        return 1
    print("\nselfcheck passed" + not_run_summary([ts for name, ts in rows if name.startswith("solutions")]))
    return 0


def not_run_summary(graded) -> str:
    """What the verdict does not cover: the tasks not run here, and the checks of the others that did not run."""
    whole = sorted({ts.task.id for ts in graded if ts.status == "not_run"})
    partly = sorted(
        {
            f"{ts.task.id} ({ts.not_run:.2f} of {ts.max_score:g} points)"
            for ts in graded
            if ts.status == "ran" and not ts.complete
        }
    )
    parts = ([f"tasks not run here: {', '.join(whole)}"] if whole else []) + (
        [f"checks not run here: {', '.join(partly)}"] if partly else []
    )
    return f" for what runs on this host; NOT checked: {'; '.join(parts)}" if parts else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="grade the solutions this many times")
    parser.add_argument("--solutions-only", action="store_true", help="skip grading the starter")
    args = parser.parse_args(argv)
    return run_selfcheck(args.repeats, starter=not args.solutions_only)


if __name__ == "__main__":
    sys.exit(main())
