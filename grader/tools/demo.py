"""``make demo``: the kit's main job on its embedded default.

Grades the reference solutions as a sample submission (the tasks this host can
run: CPU tasks everywhere, GPU tasks where a GPU is present), with the theory
answer key of a demo student id as its theory answers, prints the score table,
renders the handout and says where everything went.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from assignment.registry import load_registry
from grader.grade.config import REPO_ROOT, GradeConfig
from grader.grade.grade import grade_submission
from grader.grade.report import summary_lines
from grader.grade.runner import gpu_available
from grader.grade.theory import reference_answers

OUT = REPO_ROOT / "build" / "demo"
DEMO_STUDENT_ID = "demo-student"


def sample_submission(registry, folder: Path) -> Path:
    """The reference solutions plus the demo id's theory answer key: a submission that earns every point the
    grader gives (the theory's written proof is a placeholder, left for grading by hand)."""
    submission = folder / "solutions"
    shutil.copytree(REPO_ROOT / "solutions", submission, ignore=shutil.ignore_patterns("__pycache__"))
    if registry.theory:
        (submission / registry.theory.answers_file).write_text(
            reference_answers(DEMO_STUDENT_ID, registry), encoding="utf-8"
        )
    return submission


def main() -> int:
    registry = load_registry()
    print(f"== {registry.title}: demo ==")
    print(f"GPU: {'yes' if gpu_available() else 'none (GPU tasks are reported as not run)'}")
    print(f"1/2 grading the reference solutions as a sample submission -> {OUT / 'grade'}")
    # The reference solutions are trusted code: no preflight refusal, and any isolation this host has.
    config = replace(GradeConfig(), allow_weak_isolation=True, preflight=False, student_id=DEMO_STUDENT_ID)
    with tempfile.TemporaryDirectory(prefix="kit-demo-") as tmp:
        result = grade_submission(sample_submission(registry, Path(tmp)), OUT / "grade", config, registry)
    print("\n".join(summary_lines(result)))
    print(f"total {result.score:.2f} / {result.max_score(registry):g}\n")
    print("2/2 rendering the handout")
    from handout import render

    # Where no Chromium can be had (a GPU node without network), keep the HTML.
    os.environ.setdefault("HANDOUT_PDF", "optional")
    code = render.main([])
    # Without a GPU a GPU task with CPU checks (t6's cache) runs only those, and cannot earn its timed points:
    # there every check that ran must pass; elsewhere every point must be earned.
    has_gpu = gpu_available()
    failed = [
        ts.task.id
        for ts in result.tasks
        if ts.status == "ran"
        and (ts.passed < ts.total if ts.task.needs_gpu and not has_gpu else ts.score < ts.max_score - 1e-9)
    ]
    if result.theory and result.theory.score < result.theory.numeric_max - 1e-9:
        failed.append("the theory answers")
    print("\nOutputs:")
    print(f"  Gradescope results: {OUT / 'grade' / 'results.json'}")
    print(f"  CSV gradebook row:  {OUT / 'grade' / 'grades.csv'}")
    print(f"  instructor record:  {OUT / 'grade' / 'grading.json'} (isolation: {result.grading['isolation']})")
    print(f"  feedback page:      {OUT / 'grade' / 'report.html'}")
    print(f"  handout:            {REPO_ROOT / 'build' / 'handout' / 'handout.html'} (and handout.pdf)")
    if failed:
        print("demo: the reference solutions did not score full marks on " + ", ".join(failed))
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
